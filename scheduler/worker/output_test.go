package worker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// The live ring keeps the last LiveOutputBytes, says what it dropped, and
// hands out whole runes only, so a reader that goes on from Next never
// sees a character cut in two.
func TestOutputRing_Bounds(t *testing.T) {
	r := newOutputRing(LiveOutputBytes)
	big := strings.Repeat("0123456789abcdef", 100<<10/16) // 100 KiB
	r.Write([]byte(big))
	c := r.since(0)
	if got, want := len(c.Text), LiveOutputBytes; got != want {
		t.Fatalf("kept %d bytes of 100 KiB, want the last %d", got, want)
	}
	if !c.Skipped || c.From != int64(len(big)-LiveOutputBytes) || c.Next != int64(len(big)) || c.Text != big[len(big)-LiveOutputBytes:] {
		t.Fatalf("chunk from %d next %d skipped %v: want the last 64 KiB from %d, skipped", c.From, c.Next, c.Skipped, len(big)-LiveOutputBytes)
	}
	if again := r.since(c.Next); again.Text != "" || again.Next != c.Next || again.Skipped {
		t.Errorf("nothing new: got %+v", again)
	}
	r.Write([]byte("hello\n"))
	if got := r.since(c.Next); got.Text != "hello\n" || got.From != c.Next || got.Next != c.Next+6 {
		t.Errorf("after hello: %+v", got)
	}
	// Many small writes stay bounded too.
	for range 10_000 {
		r.Write([]byte("line of output\n"))
	}
	if got := r.since(0); len(got.Text) != LiveOutputBytes {
		t.Errorf("after many writes: %d bytes kept, want %d", len(got.Text), LiveOutputBytes)
	}

	// A rune whose bytes are not all written is held back.
	u := newOutputRing(16)
	e := "é" // 2 bytes
	u.Write([]byte("a" + e[:1]))
	first := u.since(0)
	if first.Text != "a" || first.Next != 1 {
		t.Fatalf("half a rune: %+v, want only \"a\"", first)
	}
	u.Write([]byte(e[1:]))
	if got := u.since(first.Next); got.Text != e || got.Next != 3 {
		t.Errorf("the rune completed: %+v, want %q", got, e)
	}
	// Dropped bytes that leave a rune's tail at the front are skipped.
	v := newOutputRing(4)
	v.Write([]byte("xé" + "éé")) // 7 bytes; the last 4 are "éé"
	v.Write([]byte("b"))         // the last 4: second byte of é, "é", "b"
	if got := v.since(0); got.Text != "éb" || !utf8.ValidString(got.Text) {
		t.Errorf("front cut inside a rune: %q, want \"éb\"", got.Text)
	}
}

// TailText bounds the record's tail in bytes of valid UTF-8, whatever
// the job wrote: the leader refuses a completion whose tail is longer.
func TestTailText(t *testing.T) {
	binary := []byte(strings.Repeat("\xffa", 20<<10)) // each invalid byte grows to 3
	s := TailText(binary, StdoutTailBytes)
	if len(s) > StdoutTailBytes || !utf8.ValidString(s) || len(s) < StdoutTailBytes-utf8.UTFMax {
		t.Errorf("binary output: %d bytes, valid %v; want at most (and nearly) %d bytes of UTF-8", len(s), utf8.ValidString(s), StdoutTailBytes)
	}
	if got := TailText([]byte("ééé"), 5); got != "éé" {
		t.Errorf("cut on a rune's start: %q, want \"éé\"", got)
	}
	if got := TailText([]byte("short\n"), 16); got != "short\n" {
		t.Errorf("short output: %q", got)
	}
}

// A running attempt's output can be read from its worker while it runs;
// the completion carries stdout's tail (the job publishes nothing), and
// once the completion is reported the worker forgets it.
func TestWorker_LiveOutput(t *testing.T) {
	l := holdingLeader{done: make(chan replicated.Completion, 1)}
	w := &Worker{ID: "w1", Store: &funcStore{}, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)}
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	gate := filepath.Join(t.TempDir(), "go-on")
	script := `echo "line <one>"; echo "err one" >&2; i=0; while [ ! -e "$GATE" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo "line two"`
	spec := jobs.Spec{Name: "talk", Command: []string{"sh", "-c", script}, Env: map[string]string{"GATE": gate},
		Timeout: jobs.Duration(time.Minute), LeaseTTL: jobs.Duration(5 * time.Second)}
	a := Assignment{Run: jobs.Run{ID: "talk@x", Job: "talk"}, Spec: spec,
		Attempt: jobs.Attempt{ID: "talk@x.1", Number: 1, Worker: "w1", Token: jobs.Fence{Epoch: 1, Seq: 5}, GrantedAt: time.Now()}}
	if _, err := w.Output(OutputRequest{Attempt: a.Attempt.ID}); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("before it runs: %v, want ErrNotFound", err)
	}
	if err := w.Accept(a); err != nil {
		t.Fatal(err)
	}
	var live LiveOutput
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		live, err = w.Output(OutputRequest{Attempt: a.Attempt.ID})
		if err == nil && strings.Contains(live.Stdout.Text, "line <one>") && strings.Contains(live.Stderr.Text, "err one") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live output never showed the first lines: %+v, %v", live, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !live.Running || live.Node != "w1" || strings.Contains(live.Stdout.Text, "line two") {
		t.Errorf("while it runs: %+v", live)
	}
	// Go on from where the reader left off: only what is new.
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := l.completion(t)
	if c.State != jobs.Succeeded || c.StdoutTail != "line <one>\nline two\n" || c.StderrTail != "err one\n" {
		t.Errorf("completion %+v: want succeeded with stdout tail %q", c, "line <one>\nline two\n")
	}
	// After the report, the record has it and the worker lets go.
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := w.Output(OutputRequest{Attempt: a.Attempt.ID})
		if errors.Is(err, jobs.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker still has the output of a reported attempt: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stdout that was published is not kept on the record (the store has
// it); stdout that was not is, its last StdoutTailBytes only.
func TestWorker_StdoutTail(t *testing.T) {
	ok := &funcStore{
		establish: func(req fencedstore.EstablishRequest) (fencedstore.Result, error) {
			return fencedstore.Result{Outcome: fencedstore.Established, Key: req.Key, Greatest: req.Token}, nil
		},
		publish: func(req fencedstore.PublishRequest) (fencedstore.Result, error) {
			return fencedstore.Result{Outcome: fencedstore.Applied, Key: req.Key, Version: 1, Greatest: req.Token}, nil
		},
	}
	if _, c := runOne(t, ok, time.Now()); c.State != jobs.Succeeded || c.StdoutTail != "" {
		t.Errorf("published: state %s, stdout tail %q; want succeeded and none", c.State, c.StdoutTail)
	}
	l := holdingLeader{done: make(chan replicated.Completion, 1)}
	w := &Worker{ID: "w1", Store: &funcStore{}, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)}
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	// 40 KiB of numbered lines, then an exit code 3.
	spec := jobs.Spec{Name: "loud", Command: []string{"sh", "-c", `i=0; while [ $i -lt 4000 ]; do printf 'line %05d ..\n' $i; i=$((i+1)); done; exit 3`},
		Timeout: jobs.Duration(time.Minute), LeaseTTL: jobs.Duration(5 * time.Second)}
	a := Assignment{Run: jobs.Run{ID: "loud@x", Job: "loud"}, Spec: spec,
		Attempt: jobs.Attempt{ID: "loud@x.1", Number: 1, Worker: "w1", Token: jobs.Fence{Epoch: 1, Seq: 5}, GrantedAt: time.Now()}}
	if err := w.Accept(a); err != nil {
		t.Fatal(err)
	}
	c := l.completion(t)
	if c.State != jobs.Failed || len(c.StdoutTail) != StdoutTailBytes || !strings.HasSuffix(c.StdoutTail, "line 03999 ..\n") {
		t.Errorf("failed loud job: state %s, tail of %d bytes ending %q; want failed, %d bytes ending with the last line",
			c.State, len(c.StdoutTail), c.StdoutTail[max(0, len(c.StdoutTail)-20):], StdoutTailBytes)
	}
}
