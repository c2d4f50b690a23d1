package worker

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/fencecron/fencecron/jobs"
)

// A running attempt's output is watched live, and a finished one's kept
// with its record.
//
// Live: the worker keeps the last LiveOutputBytes of each stream of each
// attempt it runs, in memory (a ring per stream), for as long as the
// attempt is there (until its completion has been reported). Any node
// asks it for them over the internal API (scheduler/rpc, /output) on
// behalf of the dashboard; nothing of it touches the log.
//
// Finished: the completion carries the last StdoutTailBytes of stdout
// (Completion.StdoutTail, log version 4) beside the stderr tail it
// already carried, and the FSM keeps it on the attempt, so it lives and
// dies with the run: in the hot window, then in each server's history
// file (scheduler/history), under the run's retention. Why a bounded
// field of the completion and not a side channel to the history file:
// every server's history is fed by the log alone (which is what keeps
// the servers' files equal without a second consensus), so anything kept
// with a run must travel in its entries. The cost is bounded and paid
// only where it buys something: a job whose stdout was published has it
// in the store already and sends no tail; a job that prints nothing
// sends nothing; the rest at most 16 KiB per attempt, within the
// completion groups' 1 MiB (maxGroupBytes, groupcommit.go).

// Bounds of the captured output.
const (
	// LiveOutputBytes is how much of each stream of a running attempt
	// its worker keeps for watching.
	LiveOutputBytes = 64 << 10
	// StdoutTailBytes is how much of a finished attempt's stdout its
	// record keeps (Attempt.StdoutTail), when the stdout was not
	// published.
	StdoutTailBytes = 16 << 10
)

// OutputRequest asks a worker for what an attempt wrote to each stream
// from the given offsets on (0: all that is kept).
type OutputRequest struct {
	Attempt    string `json:"attempt"`
	StdoutFrom int64  `json:"stdout_from,omitempty"`
	StderrFrom int64  `json:"stderr_from,omitempty"`
}

// OutputChunk is a part of one stream: Text (valid UTF-8) starts at byte
// offset From of the stream; ask from Next for what follows. Skipped is
// set when bytes before From that were asked for are no longer kept.
type OutputChunk struct {
	Text    string `json:"text"`
	From    int64  `json:"from"`
	Next    int64  `json:"next"`
	Skipped bool   `json:"skipped,omitempty"`
}

// LiveOutput is what an attempt wrote so far. Running is false once its
// process has exited; Final is set when the output comes from the
// attempt's record (it has finished), not from its worker.
type LiveOutput struct {
	Attempt string      `json:"attempt"`
	Node    string      `json:"node,omitempty"`
	Running bool        `json:"running"`
	Final   bool        `json:"final,omitempty"`
	Stdout  OutputChunk `json:"stdout"`
	Stderr  OutputChunk `json:"stderr"`
}

// RecordedOutput is the output an attempt's record keeps: its stdout and
// stderr tails.
func RecordedOutput(a jobs.Attempt) LiveOutput {
	return LiveOutput{
		Attempt: a.ID, Node: a.Worker, Final: true,
		Stdout: OutputChunk{Text: a.StdoutTail, Next: int64(len(a.StdoutTail))},
		Stderr: OutputChunk{Text: a.StderrTail, Next: int64(len(a.StderrTail))},
	}
}

// outputRing keeps the last size bytes written to it, and counts all of
// them. It is safe for concurrent use: the executor writes, readers read.
type outputRing struct {
	size int

	mu    sync.Mutex
	buf   []byte // the newest bytes; at most 2*size, trimmed to size
	total int64  // bytes ever written
}

func newOutputRing(size int) *outputRing { return &outputRing{size: size} }

// Write keeps p's last bytes; it never fails and never blocks for long.
func (r *outputRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total += int64(len(p))
	if len(p) >= r.size {
		r.buf = append(r.buf[:0], p[len(p)-r.size:]...)
		return len(p), nil
	}
	r.buf = append(r.buf, p...)
	if len(r.buf) > 2*r.size {
		r.buf = append(r.buf[:0], r.buf[len(r.buf)-r.size:]...)
	}
	return len(p), nil
}

// since returns what is kept from offset from on.
func (r *outputRing) since(from int64) OutputChunk {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.buf
	if len(kept) > r.size {
		kept = kept[len(kept)-r.size:]
	}
	start := r.total - int64(len(kept))
	c := OutputChunk{From: from}
	if from < start || from > r.total {
		// Older than what is kept (or not an offset of this stream):
		// from the oldest byte kept, on a rune's start.
		c.Skipped = from < start
		c.From = start
		for i := 0; i < len(kept) && i < utf8.UTFMax && !utf8.RuneStart(kept[0]); i++ {
			kept = kept[1:]
			c.From++
		}
	} else {
		kept = kept[from-start:]
	}
	kept = wholeRunes(kept)
	c.Next = c.From + int64(len(kept))
	c.Text = strings.ToValidUTF8(string(kept), "\uFFFD")
	return c
}

// tail returns the last n bytes kept, as valid UTF-8 of at most n bytes.
func (r *outputRing) tail(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return TailText(r.buf, n)
}

// wholeRunes cuts b before a rune whose bytes have not all been written
// yet, so a reader asking again from there gets it whole.
func wholeRunes(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// TailText returns the end of b as valid UTF-8 of at most n bytes:
// invalid bytes become U+FFFD, and the cut falls on a rune's start. (A
// byte count that grew while being made valid would otherwise exceed the
// bound the leader checks.)
func TailText(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	for len(s) > n {
		_, size := utf8.DecodeRuneInString(s)
		s = s[size:]
	}
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}

// attemptOutput is what one running attempt wrote.
type attemptOutput struct {
	stdout, stderr *outputRing
	mu             sync.Mutex
	running        bool
}

// liveOutputs are the attempts of one worker whose output can be
// watched. The zero value is ready.
type liveOutputs struct {
	mu sync.Mutex
	m  map[string]*attemptOutput
}

// start returns the rings of a new attempt's process.
func (l *liveOutputs) start(attempt string) *attemptOutput {
	o := &attemptOutput{stdout: newOutputRing(LiveOutputBytes), stderr: newOutputRing(LiveOutputBytes), running: true}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*attemptOutput{}
	}
	l.m[attempt] = o
	return o
}

// exited records that the attempt's process is gone.
func (o *attemptOutput) exited() {
	o.mu.Lock()
	o.running = false
	o.mu.Unlock()
}

// stop forgets an attempt once its record has the rest.
func (l *liveOutputs) stop(attempt string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, attempt)
}

// Output returns what an attempt running here wrote from the asked
// offsets on; jobs.ErrNotFound if it is not here (never was, or its
// completion has been reported: its record has the tail).
func (w *Worker) Output(req OutputRequest) (LiveOutput, error) {
	w.live.mu.Lock()
	o, ok := w.live.m[req.Attempt]
	w.live.mu.Unlock()
	if !ok {
		return LiveOutput{}, fmt.Errorf("output of attempt %s: not running on %s: %w", req.Attempt, w.ID, jobs.ErrNotFound)
	}
	o.mu.Lock()
	running := o.running
	o.mu.Unlock()
	return LiveOutput{Attempt: req.Attempt, Node: w.ID, Running: running, Stdout: o.stdout.since(req.StdoutFrom), Stderr: o.stderr.since(req.StderrFrom)}, nil
}
