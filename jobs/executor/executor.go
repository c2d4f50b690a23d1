// Package executor runs a job's command as the worker's half of a run: in
// its own process group, with a timeout, a cap on captured output, and a
// guarantee that nothing in the group outlives the run.
//
// The guarantee covers every process that stays in the group: the command,
// its children and theirs, whatever signals they ignore. A process that
// deliberately leaves the group (setsid) escapes it; Run still returns
// within the grace period, but does not chase it.
package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FencePrefix starts the names of the fence variables (FENCECRON_TOKEN,
// _EPOCH, _SEQ, _RUN_ID, _JOB, _SCHEDULED_AT, _STORE). A job sees only
// those its Request.Env sets: any the worker inherited, such as a
// FENCECRON_SECRET it was started with, are removed.
const FencePrefix = "FENCECRON_"

// Defaults applied by Run for zero fields.
const (
	DefaultGrace      = 5 * time.Second
	DefaultStderrTail = 4 << 10
)

// Request is one command to run.
type Request struct {
	Argv []string
	// Env ("NAME=value") is added to the worker's own environment, minus
	// the inherited FENCECRON_ variables and DropEnv; it wins over both.
	Env []string
	// DropEnv names variables of the worker's environment the command
	// must not inherit, such as those the config file took secrets from.
	DropEnv []string
	Dir     string
	// Timeout bounds the run; 0 means no timeout besides ctx.
	Timeout time.Duration
	// MaxOutput caps the captured stdout; output beyond it is drained and
	// dropped, and Result.OutputTruncated is set. 0 means no cap.
	MaxOutput int64
	// StderrTail is how many trailing bytes of stderr to keep.
	StderrTail int
	// Grace is how long the group has between SIGTERM and SIGKILL.
	Grace time.Duration
	// Stdout and Stderr, if set, get a copy of everything the command
	// writes, as it writes it (the worker's live output). They must not
	// block: a slow one holds the command's pipe.
	Stdout, Stderr io.Writer
	// Spawner, if set, lowers the command to the jobs' priority as soon
	// as it runs; nil leaves it at the caller's.
	Spawner *Spawner
	// OnStart, if set, is called with the process's id once the
	// command's exec succeeded, before Run waits for it: the instant a
	// job's lateness is measured to. When many commands are due at once
	// their forks and execs share the CPUs, so this can be well after
	// Run was called. It must not block.
	OnStart func(pid int)
}

// Result is what happened.
type Result struct {
	// Started is when the process was exec'd (or an HTTP request sent);
	// Ended when it exited and was reaped (the response was read), or
	// when its start failed.
	Started, Ended time.Time
	// ExitCode is the exit status, or -1 if the process was killed by a
	// signal or never started.
	ExitCode        int
	Signal          string
	Stdout          []byte
	OutputTruncated bool
	StderrTail      string
	// TimedOut is set when the run hit Request.Timeout; Cancelled when ctx
	// ended it.
	TimedOut, Cancelled bool
	// Err is set when the command could not be started (or an HTTP
	// request failed: RunHTTP).
	Err error
	// Status is the response status of an HTTP job's request.
	Status int
}

// Duration returns how long the command ran, or zero if it never started.
func (r Result) Duration() time.Duration {
	if r.Started.IsZero() || r.Ended.IsZero() {
		return 0
	}
	return r.Ended.Sub(r.Started)
}

// Success reports whether the command ran to completion with exit code 0
// and its whole output was captured.
func (r Result) Success() bool {
	return r.Err == nil && r.ExitCode == 0 && !r.TimedOut && !r.Cancelled && !r.OutputTruncated
}

// Run runs req and returns when the command and every process of its group
// have exited. Cancelling ctx terminates the group: SIGTERM, then SIGKILL
// after the grace period.
func Run(ctx context.Context, req Request) Result {
	if req.Grace <= 0 {
		req.Grace = DefaultGrace
	}
	if req.StderrTail <= 0 {
		req.StderrTail = DefaultStderrTail
	}
	res := Result{ExitCode: -1}
	if len(req.Argv) == 0 {
		res.Err = errors.New("empty command")
		return res
	}
	if err := ctx.Err(); err != nil {
		res.Cancelled = true
		res.Err = fmt.Errorf("not started: %w", err)
		return res
	}

	p, err := openPipes()
	if err != nil {
		res.Err = err
		return res
	}
	cmd := command(req, p)
	// A run is timed from its exec to its reaped exit: a command that
	// ends in a millisecond spends most of it in the exec, which a clock
	// read after Start returned would leave out.
	res.Started = time.Now()
	err = req.Spawner.Start(ctx, cmd)
	p.outW.Close()
	p.errW.Close()
	if err != nil {
		p.closeReaders()
		res.Err = fmt.Errorf("start %s: %w", req.Argv[0], err)
		res.Cancelled = ctx.Err() != nil // it ended before or during the start
		res.Ended = time.Now()
		return res
	}
	pgid := cmd.Process.Pid
	out := captureOutput(req, p)
	if req.OnStart != nil {
		req.OnStart(pgid)
	}

	w := watchGroup(ctx, pgid, req.Timeout, req.Grace)
	waitErr := cmd.Wait()
	reaped := time.Now()
	w.exit()
	// Whatever the command left in its group goes with it.
	syscall.Kill(-pgid, syscall.SIGKILL)
	out.drain(p, req.Grace)

	res.Ended = reaped
	res.Cancelled, res.TimedOut = w.cancelled, w.timedOut
	res.Stdout = out.stdout.buf
	res.OutputTruncated = out.stdout.truncated
	res.StderrTail = string(out.stderr.bytes())
	res.setExit(waitErr)
	return res
}

// pipes are the command's stdout and stderr. They are our own, not
// exec's, so that Wait returns when the command exits even if a
// grandchild still holds them; the group is reaped before they are
// drained.
type pipes struct {
	outR, outW, errR, errW *os.File
}

func openPipes() (pipes, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return pipes{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return pipes{}, err
	}
	return pipes{outR: outR, outW: outW, errR: errR, errW: errW}, nil
}

func (p pipes) closeReaders() {
	p.outR.Close()
	p.errR.Close()
}

// command builds req's command in a process group of its own, so that
// the whole group can be signalled and nothing in it outlives the run.
func command(req Request, p pipes) *exec.Cmd {
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Env = environ(os.Environ(), req.DropEnv, req.Env)
	cmd.Dir = req.Dir
	cmd.Stdout, cmd.Stderr = p.outW, p.errW
	if null, err := devNull(); err == nil {
		cmd.Stdin = null
	} // else exec opens it itself, and says why it could not
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// capture is a running command's output: what is kept of it, filled by
// one copy per pipe, which also feeds Request.Stdout and Stderr.
type capture struct {
	stdout *capBuffer
	stderr *tailBuffer
	wg     sync.WaitGroup
}

func captureOutput(req Request, p pipes) *capture {
	c := &capture{stdout: &capBuffer{max: req.MaxOutput}, stderr: &tailBuffer{max: req.StderrTail}}
	var outW, errW io.Writer = c.stdout, c.stderr
	if req.Stdout != nil {
		outW = io.MultiWriter(c.stdout, req.Stdout)
	}
	if req.Stderr != nil {
		errW = io.MultiWriter(c.stderr, req.Stderr)
	}
	c.wg.Add(2)
	go func() { defer c.wg.Done(); copyPipe(outW, p.outR) }()
	go func() { defer c.wg.Done(); copyPipe(errW, p.errR) }()
	return c
}

// drain waits for the copies to end and closes the pipes. The pipes close
// when the last holder dies. A process that left the group (setsid) could
// hold them forever, so it waits at most grace.
func (c *capture) drain(p pipes, grace time.Duration) {
	copied := make(chan struct{})
	go func() { c.wg.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(grace):
		p.closeReaders()
		<-copied
	}
	p.closeReaders()
}

// groupWatch terminates a command's process group on timeout or cancel:
// SIGTERM, then SIGKILL after the grace period, unless the command exits
// first.
type groupWatch struct {
	exited, done chan struct{}
	// cancelled and timedOut say why the group was terminated; read
	// them only after exit.
	cancelled, timedOut bool
}

func watchGroup(ctx context.Context, pgid int, timeout, grace time.Duration) *groupWatch {
	w := &groupWatch{exited: make(chan struct{}), done: make(chan struct{})}
	var expired <-chan time.Time
	stop := func() bool { return false }
	if timeout > 0 {
		t := time.NewTimer(timeout)
		expired, stop = t.C, t.Stop
	}
	go func() {
		defer close(w.done)
		defer stop()
		select {
		case <-w.exited:
			return
		case <-ctx.Done():
			w.cancelled = true
		case <-expired:
			w.timedOut = true
		}
		// Ask the whole group to stop, then make it.
		syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-w.exited:
		case <-t.C:
			syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}()
	return w
}

// exit tells the watch the command has exited and waits for it to end.
func (w *groupWatch) exit() {
	close(w.exited)
	<-w.done
}

// setExit records how the command ended, from Wait's error.
func (r *Result) setExit(waitErr error) {
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
		r.ExitCode = 0
	case errors.As(waitErr, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Signal = ws.Signal().String()
			r.ExitCode = -1
		} else {
			r.ExitCode = ee.ExitCode()
		}
	default:
		r.Err = waitErr
	}
}

// devNull is the commands' standard input, opened once: exec would open
// and close /dev/null for every command it starts. Starts only hand the
// descriptor to the child, so one file serves them all at once.
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// environ returns the command's environment: base without the fence
// variables and the names in drop, then add (later entries win).
func environ(base, drop, add []string) []string {
	env := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, FencePrefix) || slices.Contains(drop, name) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, add...)
}

// capBuffer keeps the first max bytes written to it and counts the rest.
type capBuffer struct {
	max       int64
	buf       []byte
	truncated bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	room := b.max - int64(len(b.buf))
	if b.max > 0 && int64(len(p)) > room {
		b.buf = append(b.buf, p[:max(room, 0)]...)
		b.truncated = true
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// pipeBufs holds copyPipe's buffers. 4 KiB is what a C program's stdio
// writes to a pipe at a time, so a larger buffer would rarely fill.
var pipeBufs = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}

// copyPipe copies r to w until r ends, ignoring w's errors so that the
// command never blocks on a full pipe. It exists because io.Copy from an
// *os.File allocates 32 KiB per call (the file's WriteTo hides its reads
// from io.Copy's buffer reuse): two per run, held for as long as the
// command runs, which at hundreds of runs a second was a third of all the
// node allocated, and under overload, with thousands of commands waiting
// for a CPU, most of its memory.
func copyPipe(w io.Writer, r io.Reader) {
	bp := pipeBufs.Get().(*[]byte)
	defer pipeBufs.Put(bp)
	for {
		n, err := r.Read(*bp)
		if n > 0 {
			w.Write((*bp)[:n])
		}
		if err != nil {
			return
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2*b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) bytes() []byte {
	if len(b.buf) > b.max {
		return b.buf[len(b.buf)-b.max:]
	}
	return b.buf
}
