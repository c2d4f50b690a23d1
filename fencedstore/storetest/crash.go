package storetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/fencemodel"
)

// Environment of a crash-test child process.
const (
	// CrashChildEnv, when set, turns a test binary into a crash-test
	// writer (see MaybeCrashChild).
	CrashChildEnv = "FENCECRON_STORETEST_CRASH_CHILD"
	crashRoundEnv = "FENCECRON_STORETEST_CRASH_ROUND"
)

// crashKeys are the keys the crash writer uses.
var crashKeys = []string{"crash/a", "crash/b", "crash/c", "crash/d"}

// crashWriters is how many goroutines of the child write at once.
const crashWriters = 8

// crashChildLifetime bounds a child that nobody kills.
const crashChildLifetime = 60 * time.Second

// MaybeCrashChild is called first thing in a backend's TestMain. In the
// crash test's child process (CrashChildEnv set) it opens the store with
// open, writes to it from several goroutines until it is killed, printing
// one "ack" line on stdout for every call after the store has answered it,
// and never returns. Elsewhere it returns at once.
func MaybeCrashChild(open func() (fencedstore.Store, error)) {
	if os.Getenv(CrashChildEnv) == "" {
		return
	}
	round, err := strconv.ParseUint(os.Getenv(crashRoundEnv), 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child: bad round:", err)
		os.Exit(3)
	}
	s, err := open()
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child: open:", err)
		os.Exit(3)
	}
	crashWrite(s, round)
	os.Exit(0)
}

// crashWrite is the child's work: rounds use ever newer epochs, so every
// round's tokens are newer than every earlier round's, as after a new
// leader. Within a round the seq comes from a shared counter. Some calls
// are establishes, some are publishes from a "woken" old owner with a
// token from round 0, which must be refused.
func crashWrite(s fencedstore.Store, round uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), crashChildLifetime)
	defer cancel()
	var out sync.Mutex
	ack := func(kind, key string, tok fencedstore.Token, res fencedstore.Result, hash string) {
		line := fmt.Sprintf("ack %s %s %d %d %s %d %s\n", kind, key, tok.Epoch, tok.Seq, res.Outcome, res.Version, hash)
		out.Lock()
		defer out.Unlock()
		os.Stdout.WriteString(line) // one write per line: whole lines reach the pipe
	}
	var seq atomic.Uint64
	var wg sync.WaitGroup
	if sw, ok := s.(fencedstore.Sweeper); ok {
		wg.Go(func() { crashSweep(ctx, s, sw, round, &seq, ack) })
	}
	for w := range crashWriters {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(round, uint64(w)))
			for ctx.Err() == nil {
				key := crashKeys[rng.IntN(len(crashKeys))]
				tok := fencedstore.Token{Epoch: round + 2, Seq: seq.Add(1)}
				attempt := fmt.Sprintf("r%d.w%d", round, w)
				var res fencedstore.Result
				var err error
				kind, hash := "publish", "-"
				switch p := rng.IntN(10); {
				case p == 0:
					kind = "establish"
					res, err = s.Establish(ctx, fencedstore.EstablishRequest{Key: key, Token: tok, Attempt: attempt})
				case p == 1:
					tok = fencedstore.Token{Epoch: 1, Seq: tok.Seq}
					body := []byte(fmt.Sprintf("stale %d", tok.Seq))
					hash = fencedstore.Hash(body)
					res, err = s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: tok, Attempt: "old-owner", Body: body})
				default:
					body := []byte(fmt.Sprintf("round %d writer %d seq %d %s", round, w, tok.Seq, strings.Repeat("x", rng.IntN(512))))
					hash = fencedstore.Hash(body)
					res, err = s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: tok, Attempt: attempt, Body: body})
				}
				if err != nil && !errors.Is(err, fencedstore.ErrStaleOwner) && !errors.Is(err, fencedstore.ErrConflict) {
					fmt.Fprintln(os.Stderr, "crash child:", err)
					continue
				}
				ack(kind, key, tok, res, hash)
			}
		})
	}
	wg.Wait()
}

// Retention in the crash test: one more writer publishes to sweepKeys and
// after every few publishes sweeps them down to sweepKeep keys and drops
// every tombstone at once (raising the floor of sweepPrefix), so that the
// kill also lands inside retention's multi-step writes.
const (
	sweepPrefix = "sweep/"
	sweepKeys   = 12
	sweepKeep   = 3
)

var sweepRule = fencedstore.RetentionRule{Prefix: sweepPrefix, MaxKeys: sweepKeep}

func crashSweep(ctx context.Context, s fencedstore.Store, sw fencedstore.Sweeper, round uint64, seq *atomic.Uint64, ack func(kind, key string, tok fencedstore.Token, res fencedstore.Result, hash string)) {
	rng := rand.New(rand.NewPCG(round, 1000))
	for i := 0; ctx.Err() == nil; i++ {
		key := fmt.Sprintf("%s%02d", sweepPrefix, rng.IntN(sweepKeys))
		tok := fencedstore.Token{Epoch: round + 2, Seq: seq.Add(1)}
		body := []byte(fmt.Sprintf("sweep round %d seq %d", round, tok.Seq))
		res, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: tok, Attempt: fmt.Sprintf("r%d.sweeper", round), Body: body})
		if err == nil || fencedstore.IsDecision(err) {
			ack("publish", key, tok, res, fencedstore.Hash(body))
		}
		if i%4 == 3 {
			if _, err := sw.SweepRule(ctx, sweepRule, time.Now(), 4); err != nil && ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "crash child: sweep:", err)
			}
			if _, _, err := sw.DropTombstones(ctx, time.Now().Add(time.Hour), 4); err != nil && ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "crash child: drop tombstones:", err)
			}
		}
	}
}

// checkSweptKeys checks, after a kill, that no key retention may have
// deleted takes a token older than one it acknowledged (whether the key is
// live, a tombstone, or gone under the prefix's floor), and that a sweep
// still brings the prefix down to its limit (the indexes survived).
func checkSweptKeys(t *testing.T, round int, s fencedstore.Store, acked []crashAck) {
	t.Helper()
	ctx := context.Background()
	newest := map[string]fencedstore.Token{}
	for _, a := range acked {
		if strings.HasPrefix(a.key, sweepPrefix) && a.outcome == fencedstore.Applied && newest[a.key].Less(a.tok) {
			newest[a.key] = a.tok
		}
	}
	for key, tok := range newest {
		old := fencedstore.Token{Epoch: tok.Epoch, Seq: tok.Seq - 1}
		if tok.Seq == 1 {
			old = fencedstore.Token{Epoch: tok.Epoch - 1, Seq: 1 << 40} // epochs start at 3
		}
		res, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: old, Attempt: "probe", Body: []byte("resurrected")})
		if !errors.Is(err, fencedstore.ErrStaleOwner) {
			t.Errorf("round %d: %s took %s after %s was acknowledged (retention lost its token): %+v, %v", round, key, old, tok, res, err)
		}
	}
	sw, ok := s.(fencedstore.Sweeper)
	if !ok {
		return
	}
	for i := 0; ; i++ {
		res, err := sw.SweepRule(ctx, sweepRule, time.Now(), 100)
		if err != nil {
			t.Fatalf("round %d: sweep after kill: %v", round, err)
		}
		if !res.More {
			break
		}
		if i == 100 {
			t.Fatalf("round %d: the sweep after the kill never ends", round)
		}
	}
	if metas, err := s.List(ctx, sweepPrefix); err != nil || len(metas) > sweepKeep {
		t.Errorf("round %d: %d keys under %s after a sweep (err %v), want at most %d", round, len(metas), sweepPrefix, err, sweepKeep)
	}
}

// crashAck is one parsed ack line.
type crashAck struct {
	kind, key string
	tok       fencedstore.Token
	outcome   fencedstore.Outcome
	version   uint64
	hash      string
}

func parseAck(line string) (crashAck, error) {
	f := strings.Fields(line)
	if len(f) != 8 || f[0] != "ack" {
		return crashAck{}, fmt.Errorf("not an ack line: %q", line)
	}
	e, err1 := strconv.ParseUint(f[3], 10, 64)
	s, err2 := strconv.ParseUint(f[4], 10, 64)
	v, err3 := strconv.ParseUint(f[6], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return crashAck{}, fmt.Errorf("ack line %q: %w", line, err)
	}
	return crashAck{kind: f[1], key: f[2], tok: fencedstore.Token{Epoch: e, Seq: s}, outcome: fencedstore.Outcome(f[5]), version: v, hash: f[7]}, nil
}

// RunCrash is the parent side of the crash test. rounds times it starts
// this test binary as a child writer (MaybeCrashChild) with env added,
// kills it with SIGKILL after a random number of acknowledged calls, then
// opens the store with open and checks that
//
//   - every publish acknowledged as applied is in the key's history with
//     its token, version and body hash, and the key's version is at least
//     that version;
//   - every key's greatest token is at least every token acknowledged as
//     applied or established, and never went backwards between rounds;
//   - each key's whole history replays through the rules
//     (fencemodel.CheckHistory), and the stored body matches its hash;
//   - for a store that is a fencedstore.Sweeper, whose child also sweeps
//     the keys under sweep/ and drops their tombstones as it writes: no
//     such key accepts a token older than one acknowledged on it, and a
//     sweep still trims the prefix to its limit (checkSweptKeys).
//
// open must return the store with a retention large enough to keep every
// decision of the test, and a function that closes it.
func RunCrash(t *testing.T, rounds int, env []string, open func(t *testing.T) (fencedstore.Store, func())) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	greatest := map[string]fencedstore.Token{}
	var acked []crashAck
	totalAcks := 0
	for round := 1; round <= rounds; round++ {
		// Kill after a random number of acks: early (before the first
		// commit is likely done), or well into the writing.
		killAfter := 1 + rng.IntN(400)
		acks, stderr := crashRound(t, exe, round, killAfter, env)
		acked = append(acked, acks...)
		totalAcks += len(acks)

		s, closeStore := open(t)
		ctx := context.Background()
		metas, err := s.List(ctx, "crash/")
		if err != nil {
			t.Fatalf("round %d: list after kill: %v", round, err)
		}
		now := map[string]fencedstore.Meta{}
		for _, m := range metas {
			now[m.Key] = m
		}
		for _, k := range crashKeys {
			if now[k].Greatest.Less(greatest[k]) {
				t.Errorf("round %d: %s greatest went back from %s to %s", round, k, greatest[k], now[k].Greatest)
			}
			greatest[k] = now[k].Greatest
		}
		hist := map[string][]fencedstore.Decision{}
		for _, k := range crashKeys {
			if _, ok := now[k]; !ok {
				continue
			}
			h, err := s.History(ctx, k)
			if err != nil {
				t.Fatalf("round %d: history %s: %v", round, k, err)
			}
			hist[k] = h
			if err := fencemodel.CheckHistory(h); err != nil {
				t.Errorf("round %d: history %s does not replay: %v", round, k, err)
			}
			if now[k].Version > 0 {
				obj, err := s.Get(ctx, k)
				if err != nil {
					t.Fatalf("round %d: get %s: %v", round, k, err)
				}
				if got := fencedstore.Hash(obj.Body); got != obj.Hash {
					t.Errorf("round %d: %s body hash %s, meta says %s", round, k, got, obj.Hash)
				}
			}
		}
		checkSweptKeys(t, round, s, acked)
		for _, a := range acked {
			if strings.HasPrefix(a.key, sweepPrefix) {
				continue // checked by checkSweptKeys: retention deletes them
			}
			m := now[a.key]
			switch a.outcome {
			case fencedstore.Applied, fencedstore.Established:
				if m.Greatest.Less(a.tok) {
					t.Errorf("round %d: %s acknowledged %s with %s, greatest is now %s", round, a.key, a.outcome, a.tok, m.Greatest)
				}
			}
			if a.outcome != fencedstore.Applied || a.kind != "publish" {
				continue
			}
			if m.Version < a.version {
				t.Errorf("round %d: %s acknowledged version %d, now at %d", round, a.key, a.version, m.Version)
			}
			found := false
			for _, d := range hist[a.key] {
				if d.Outcome == fencedstore.Applied && d.Token == a.tok && d.Version == a.version && d.Hash == a.hash {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("round %d: acknowledged publish %s %s v%d is not in the history", round, a.key, a.tok, a.version)
			}
		}
		closeStore()
		if t.Failed() {
			t.Logf("round %d child stderr:\n%s", round, stderr)
			t.FailNow()
		}
	}
	t.Logf("%d rounds killed with SIGKILL, %d acknowledged calls checked; greatest tokens %v", rounds, totalAcks, greatest)
}

// crashRound runs one child until killAfter acks (or until it has run for
// 10 s), kills it, and returns every ack it printed.
func crashRound(t *testing.T, exe string, round, killAfter int, env []string) ([]crashAck, string) {
	t.Helper()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), CrashChildEnv+"=1", crashRoundEnv+"="+strconv.Itoa(round))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	readDone := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		readDone <- sc.Err()
	}()
	var acks []crashAck
	take := func(line string) {
		a, err := parseAck(line)
		if err != nil {
			t.Errorf("round %d: %v", round, err)
			return
		}
		acks = append(acks, a)
	}
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
wait:
	for len(acks) < killAfter {
		select {
		case line, ok := <-lines:
			if !ok {
				break wait
			}
			take(line)
		case <-limit.C:
			break wait
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	// What the child printed before it died was acknowledged too.
	for line := range lines {
		take(line)
	}
	if err := <-readDone; err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("round %d: reading child output: %v", round, err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("round %d: child ended with %v, not by SIGKILL (after %d acks); stderr:\n%s", round, err, len(acks), stderr.String())
	}
	if len(acks) == 0 {
		t.Fatalf("round %d: child acknowledged nothing before the kill; stderr:\n%s", round, stderr.String())
	}
	return acks, stderr.String()
}
