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
// a lease, pipes and goroutines, so the node slowed further. The price
// of lowering after the exec: a process runs at the node's priority from
// its exec until the goroutine that started it runs again, usually
// microseconds, longer when the node is short of CPU. Starts in one node
// can overlap, so in a burst a few processes can be in that window at
// once.
type Spawner struct {
	nice int // the jobs' nice value, not an offset

	// Starts hold mu for reading, Close for writing: a start under way
	// when Close is called is finished (and its process lowered) first.
	mu     sync.RWMutex
	closed bool
}

// NewSpawner returns a spawner whose processes run `nice` levels below the
// calling thread's priority, but no lower than MaxNice. It fails if Linux
// refuses to let this process set a priority at all.
func NewSpawner(nice int) (*Spawner, error) {
	if nice < 0 {
		return nil, fmt.Errorf("nice %d: a job cannot run above the node's priority", nice)
	}
	base, err := ThreadNice()
	if err == nil {
		// Setting the value it has is always allowed, unless setting
		// any is not (a seccomp filter, say): better to know at once
		// than at every job.
		err = syscall.Setpriority(syscall.PRIO_PROCESS, 0, base)
	}
	if err != nil {
		return nil, fmt.Errorf("job priority: %w", err)
	}
	return &Spawner{nice: min(base+nice, MaxNice)}, nil
}

// ThreadNice is the calling thread's nice value: the priority a process
// it starts would have.
func ThreadNice() (int, error) { return niceOf(syscall.PRIO_PROCESS, 0) }

// niceOf is getpriority as nice(1) counts: for a group, the nice value of
// its highest-priority member.
func niceOf(which, who int) (int, error) {
	prio, err := syscall.Getpriority(which, who)
	return 20 - prio, err // the raw system call answers 20 - nice
}

// errSpawnerClosed is returned for a start asked of a closed spawner.
var errSpawnerClosed = errors.New("the job spawner is closed")

// Start starts cmd and lowers it, or does not start it if ctx ended. A
// command with SysProcAttr.Setpgid (and no Pgid) leads a group of its
// own, and the whole group is lowered, so a child it forked at once is
// too. A process already at the jobs' priority or lower (the node was
// lowered after the spawner was made) is left alone: raising it could
// need a privilege. A process that cannot be lowered is killed and
// reaped, and Start says why: a job must not run at the node's priority.
// A nil Spawner starts cmd at the caller's priority.
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
	// Unreaped, the process (a zombie at worst) keeps its id, so these
	// calls cannot reach another; ESRCH would mean nothing is left to
	// lower.
	nice, err := niceOf(which, who)
	if err == nil && nice >= s.nice {
		return nil
	}
	if err == nil {
		err = syscall.Setpriority(which, who, s.nice)
	}
	if err != nil && err != syscall.ESRCH {
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
