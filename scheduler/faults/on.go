//go:build fencecron_faults

package faults

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// Built reports whether this build has fault injection (see
// BuildTag): it has.
const Built = true

// Faults are failures a test can inject into one node through the
// FENCECRON_FAULTS environment variable, e.g.
// "stop-before-publish=1,drop-dispatch-replies=2". They exist to prove the
// protocol against the interleavings that are hard to produce by timing;
// a node logs loudly when any is enabled. Only test builds have them
// (BuildTag).
type Faults struct {
	// StopBeforePublish makes the worker stop its own process (SIGSTOP)
	// just before publishing the output of attempts with this number, as
	// a GC pause between reading and writing would. 0: never.
	StopBeforePublish int
	// DropDispatchReplies drops the replies of the first N dispatches
	// after the worker took them, as a lost network reply would.
	DropDispatchReplies int
	// DropRenewReplies makes the worker lose the replies of N consecutive
	// renewals, starting after the first one of each attempt succeeds.
	DropRenewReplies int
	// Tuning shrinks bounds and rhythms for fast tests (see Tuning).
	Tuning Tuning
	// ClockOffset moves this node's wall clock (ClockOf) by that much
	// (clock-offset-ms=N, N may be negative), as a host whose clock is
	// off would be: to prove that skew is noticed.
	ClockOffset time.Duration

	mu sync.Mutex
}

// Errors the hooks return in place of the reply they drop.
var (
	errDispatchReplyDropped = errors.New("dispatch reply dropped (fault injection)")
	errRenewReplyDropped    = errors.New("renewal reply dropped (fault injection)")
)

// ParseFaults reads the FENCECRON_FAULTS syntax. It returns nil when no
// fault is set ("" means none).
func ParseFaults(s string) (*Faults, error) {
	f := &Faults{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if k == "clock-offset-ms" {
			ms, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("fault %q: want clock-offset-ms=milliseconds", item)
			}
			f.ClockOffset = time.Duration(ms) * time.Millisecond
			continue
		}
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("fault %q: want name=count", item)
		}
		switch k {
		case "stop-before-publish":
			f.StopBeforePublish = n
		case "drop-dispatch-replies":
			f.DropDispatchReplies = n
		case "drop-renew-replies":
			f.DropRenewReplies = n
		case "hot-runs":
			f.Tuning.HotRuns = n
		case "hot-events":
			f.Tuning.HotEvents = n
		case "raft-snapshot-threshold":
			f.Tuning.SnapshotThreshold = uint64(n)
		case "raft-trailing-logs":
			f.Tuning.TrailingLogs = uint64(n)
		case "raft-snapshot-interval-ms":
			f.Tuning.SnapshotIntervalMS = n
		default:
			return nil, fmt.Errorf("unknown fault %q", k)
		}
	}
	if f.StopBeforePublish == 0 && f.DropDispatchReplies == 0 && f.DropRenewReplies == 0 && f.Tuning == (Tuning{}) && f.ClockOffset == 0 {
		return nil, nil
	}
	return f, nil
}

// ClockOf returns the node's wall clock: the system clock, moved by
// ClockOffset if set.
func ClockOf(f *Faults) jobs.Clock {
	if f == nil || f.ClockOffset == 0 {
		return jobs.SystemClock{}
	}
	return offsetClock{f.ClockOffset}
}

// offsetClock is the system clock moved by d. Durations between its
// readings are the system clock's: Add moves the monotonic reading too.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time                      { return time.Now().Add(c.d) }
func (c offsetClock) NewTimer(d time.Duration) jobs.Timer { return jobs.SystemClock{}.NewTimer(d) }

// TuningOf returns the test build's tuning (zero without faults).
func TuningOf(f *Faults) Tuning {
	if f == nil {
		return Tuning{}
	}
	return f.Tuning
}

// DropDispatchReply returns an error in place of the reply of a dispatch
// the worker took, while f has replies left to drop; nil otherwise. The
// transport calls it once the worker has taken the assignment. (A
// function, not a method: the hooks of a build without faults must leave
// no exported method behind, which the linker would keep.)
func DropDispatchReply(f *Faults) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.DropDispatchReplies > 0 {
		f.DropDispatchReplies--
		return errDispatchReplyDropped
	}
	return nil
}

// DropRenewReply returns an error in place of a renewal's reply while
// *dropped, the replies of this attempt dropped so far, is below
// DropRenewReplies, counting it; nil otherwise. The caller holds the lock
// that guards *dropped.
func DropRenewReply(f *Faults, dropped *int) error {
	if f == nil || *dropped >= f.DropRenewReplies {
		return nil
	}
	*dropped++
	return errRenewReplyDropped
}

// StopBeforePublish stops this process if attempt n is the one f pauses,
// and returns once it has been continued. kill(2) on itself returns before
// every thread has stopped, so the caller waits for the SIGCONT that ends
// the stop; otherwise it could slip its publish out first.
func StopBeforePublish(f *Faults, n int) bool {
	if f == nil || f.StopBeforePublish == 0 || f.StopBeforePublish != n {
		return false
	}
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	syscall.Kill(syscall.Getpid(), syscall.SIGSTOP)
	select {
	case <-cont:
	case <-time.After(10 * time.Minute):
	}
	return true
}
