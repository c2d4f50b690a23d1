package executor

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// MaxNice is the largest nice value Linux has: the lowest CPU priority.
const MaxNice = 19

// Spawner starts commands from one OS thread whose nice value it raised,
// so that every process started there inherits that lower CPU priority
// from its first instruction.
//
// Why: a node's jobs share its CPUs with its own Raft and lease traffic.
// When hundreds of jobs fire in the same second, hundreds of new
// processes are runnable at once; at equal priority each gets as large a
// share as one of the node's threads, and a leader that cannot answer
// its followers for half a second loses its term. At a higher nice
// value the jobs still get every cycle the node does not want, but the
// node's threads run first when they wake.
//
// Linux gives a new process the nice value of the thread that forked it.
// Raising a thread's nice value needs no privilege, lowering it again
// does, so the thread is locked to the spawner's goroutine for its whole
// life and dies with it (a goroutine that exits while locked takes its
// thread with it) instead of going back to the runtime's pool.
//
// One thread is enough: Go holds a process-wide lock (syscall.ForkLock)
// from the fork until the child has called exec, so starts never
// overlapped anyway. The fork's own part runs at the jobs' priority too;
// it is short.
type Spawner struct {
	nice  int
	reqs  chan spawnRequest
	quit  chan struct{}
	done  sync.WaitGroup
	close sync.Once
}

type spawnRequest struct {
	cmd   *exec.Cmd
	reply chan error
}

// NewSpawner starts the spawner's thread at `nice` levels below the
// calling process's priority, but no lower than MaxNice. It fails if
// Linux refuses to change the thread's priority.
func NewSpawner(nice int) (*Spawner, error) {
	if nice < 0 {
		return nil, fmt.Errorf("nice %d: a job cannot run above the node's priority", nice)
	}
	s := &Spawner{nice: nice, reqs: make(chan spawnRequest), quit: make(chan struct{})}
	ready := make(chan error, 1)
	s.done.Add(1)
	go s.loop(ready)
	if err := <-ready; err != nil {
		s.done.Wait()
		return nil, err
	}
	return s, nil
}

func (s *Spawner) loop(ready chan<- error) {
	defer s.done.Done()
	// Never unlocked once lowered: the thread must not serve other
	// goroutines at this priority, and cannot be given its old priority
	// back. (The main thread, below, is given back before it is lowered.)
	runtime.LockOSThread()
	if syscall.Gettid() == syscall.Getpid() {
		// The process's main thread outlives any goroutine locked to it,
		// and ps shows a process at its main thread's priority. Hold it
		// while another goroutine takes a thread of its own (it cannot
		// get this one while it is locked here), then give it back.
		locked := make(chan error, 1)
		s.done.Add(1)
		go s.loop(locked)
		err := <-locked
		runtime.UnlockOSThread()
		ready <- err
		return
	}
	nice, err := ThreadNice()
	if err == nil {
		err = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), min(nice+s.nice, MaxNice))
	}
	if err != nil {
		ready <- fmt.Errorf("lowering the job spawner's priority: %w", err)
		return
	}
	ready <- nil
	for {
		select {
		case r := <-s.reqs:
			r.reply <- r.cmd.Start()
		case <-s.quit:
			return
		}
	}
}

// ThreadNice is the calling thread's nice value: the priority a process
// it starts would have.
func ThreadNice() (int, error) {
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	return 20 - prio, err // the raw system call answers 20 - nice
}

// errSpawnerClosed is returned for a start asked of a closed spawner.
var errSpawnerClosed = errors.New("the job spawner is closed")

// Start starts cmd from the spawner's thread, or gives up if ctx ends
// before the thread took it. A nil Spawner starts it from the caller's.
func (s *Spawner) Start(ctx context.Context, cmd *exec.Cmd) error {
	if s == nil {
		return cmd.Start()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("not started: %w", err)
	}
	reply := make(chan error, 1)
	select {
	case s.reqs <- spawnRequest{cmd: cmd, reply: reply}:
		return <-reply
	case <-s.quit:
		return errSpawnerClosed
	case <-ctx.Done():
		return fmt.Errorf("not started: %w", ctx.Err())
	}
}

// Close ends the spawner's thread once the start it is making, if any,
// is done. Starts asked after it fail.
func (s *Spawner) Close() {
	s.close.Do(func() { close(s.quit) })
	s.done.Wait()
}
