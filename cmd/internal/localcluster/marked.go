package localcluster

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// KillMarked SIGKILLs every process (and its group) of this user whose
// environment holds marker, and returns their pids. It reads /proc: on a
// system without one it finds nothing.
func KillMarked(marker string) []int {
	pids := MarkedProcs(marker)
	for _, pid := range pids {
		killGroupAndProc(pid)
	}
	return pids
}

// MarkedProcs returns the pids whose environment holds marker exactly.
func MarkedProcs(marker string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(b), "\x00") {
			if kv == marker {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// killGroupAndProc SIGKILLs pid's process group, unless it is the caller's
// own, and pid itself.
func killGroupAndProc(pid int) {
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid != syscall.Getpgrp() {
		syscall.Kill(-pgid, syscall.SIGKILL)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}
