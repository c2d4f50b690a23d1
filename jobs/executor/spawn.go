package executor

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
)

// MaxNice is the largest nice value Linux has: the lowest CPU priority.
const MaxNice = 19

// Spawner starts commands at the node's own priority and lowers each new
// process, with its whole process group, the moment its exec succeeded.
//
// Why lower the jobs: a node's jobs share its CPUs with its own Raft and
// lease traffic. When hundreds of jobs fire in the same second, hundreds
// of new processes are runnable at once; at equal priority each gets as
// large a share as one of the node's threads, and a leader that cannot
// answer its followers for half a second loses its term. At a higher
// nice value the jobs still get every cycle the node does not want, but
// the node's threads run first when they wake.
//
// Why not fork from a lowered thread, which would give a process the
// lower priority from its first instruction: then the fork and exec
// themselves, the node's own work of starting a job on time, wait behind
// every thread of the node. Starts queued for up to a second at 500
// fires a second, and past capacity for minutes: each queued start holds
// a lease, pipes and goroutines, so the node slowed further. Forks in one
// process never overlap (Go holds syscall.ForkLock until the child has
// exec'd), so at most one process a node starts runs at the node's
// priority at a time, and only from its exec until the goroutine that
// started it lowers it, a few microseconds later.
type Spawner struct {
	nice int // the jobs' nice value, not an offset

	// Starts hold mu for reading, Close for writing: a start under way
	// when Close is called is finished (and its process lowered) first.
	mu     sync.RWMutex
	closed bool
}

// NewSpawner returns a spawner whose processes run `nice` levels below the
// calling thread's priority, but no lower than MaxNice.
func NewSpawner(nice int) (*Spawner, error) {
	if nice < 0 {
		return nil, fmt.Errorf("nice %d: a job cannot run above the node's priority", nice)
	}
	base, err := ThreadNice()
	if err != nil {
		return nil, fmt.Errorf("reading the node's priority: %w", err)
	}
	return &Spawner{nice: min(base+nice, MaxNice)}, nil
}

// ThreadNice is the calling thread's nice value: the priority a process
// it starts would have.
func ThreadNice() (int, error) {
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	return 20 - prio, err // the raw system call answers 20 - nice
}

// errSpawnerClosed is returned for a start asked of a closed spawner.
var errSpawnerClosed = errors.New("the job spawner is closed")

// Start starts cmd and lowers it, or does not start it if ctx ended. A
// command with SysProcAttr.Setpgid (and no Pgid) leads a group of its
// own, and the whole group is lowered, so a child it forked at once is
// too. A process that cannot be lowered is killed and reaped, and Start
// says why: a job must not run at the node's priority. A nil Spawner
// starts cmd at the caller's priority.
func (s *Spawner) Start(ctx context.Context, cmd *exec.Cmd) error {
	if s == nil {
		return cmd.Start()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("not started: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errSpawnerClosed
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	which, who := syscall.PRIO_PROCESS, cmd.Process.Pid
	if a := cmd.SysProcAttr; a != nil && a.Setpgid && a.Pgid == 0 {
		which = syscall.PRIO_PGRP
	}
	// Unreaped, the process (a zombie at worst) keeps its id, so the call
	// cannot reach another; ESRCH would mean nothing is left to lower.
	if err := syscall.Setpriority(which, who, s.nice); err != nil && err != syscall.ESRCH {
		if which == syscall.PRIO_PGRP {
			syscall.Kill(-who, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("lowering the job to nice %d: %w", s.nice, err)
	}
	return nil
}

// Close makes every later start fail, once the starts under way are done.
func (s *Spawner) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}
