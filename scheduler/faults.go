package scheduler

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Faults are failures a test can inject into one node through the
// FENCECRON_FAULTS environment variable, e.g.
// "stop-before-publish=1,drop-dispatch-replies=2". They exist to prove the
// protocol against the interleavings that are hard to produce by timing;
// a node logs loudly when any is enabled.
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

	mu sync.Mutex
}

// ParseFaults reads the FENCECRON_FAULTS syntax; "" means none.
func ParseFaults(s string) (*Faults, error) {
	f := &Faults{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
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
		default:
			return nil, fmt.Errorf("unknown fault %q", k)
		}
	}
	return f, nil
}

// Enabled reports whether any fault is set.
func (f *Faults) Enabled() bool {
	return f != nil && (f.StopBeforePublish > 0 || f.DropDispatchReplies > 0 || f.DropRenewReplies > 0)
}

// TakeDispatchReply reports whether to drop this dispatch reply.
func (f *Faults) TakeDispatchReply() bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.DropDispatchReplies > 0 {
		f.DropDispatchReplies--
		return true
	}
	return false
}

// stopBeforePublish stops this process if attempt n is the one to pause,
// and returns once it has been continued. kill(2) on itself returns before
// every thread has stopped, so the caller waits for the SIGCONT that ends
// the stop; otherwise it could slip its publish out first.
func (f *Faults) stopBeforePublish(n int) bool {
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
