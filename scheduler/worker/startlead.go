package worker

import (
	"sync"
	"time"
)

// The lead with which a run granted ahead asks for its start follows how
// long this worker's recent asks took to be answered, between
// startConfirmLead and maxStartLead.
//
// Asked too late, the start waits for the answer and the run is late by
// the difference: at 1,000 HTTP fires a second on a 2-core machine every
// run due at a second asks at once, and with a 25 ms lead the followers'
// runs started 10-20 ms later than the leader's own at the p50, waiting
// for the answers. Asked too early, the run is exposed for longer:
// a confirmed start makes the leader hold the job's whole lease_ttl, so a
// worker that dies between its ask and its fire time leaves the run that
// long late instead of a short lease late. A fixed 60 ms lead put the
// followers' starts at the leader's under that load, but left four times
// as many of a killed leader's runs waiting out the lease_ttl in
// fencebench failover, where the asks take a few ms. So the lead is the
// short one until the asks are slow, and only as long as they are.
const (
	maxStartLead = 100 * time.Millisecond
	// startLeadMargin covers the start after the answer arrives.
	startLeadMargin = 5 * time.Millisecond
	// askWindow is how long an ask's round trip counts: the lead follows
	// the asks of the last one to two windows.
	askWindow = 5 * time.Second
	// askBucket is the resolution of the round trips kept.
	askBucket = 5 * time.Millisecond
)

// askBuckets spans maxStartLead, with the last bucket for anything slower.
const askBuckets = int(maxStartLead/askBucket) + 1

// askTimes keeps the round trips of a worker's start asks, in 5 ms
// buckets for this window and the one before, so a worker at a thousand
// asks a second keeps 42 counters, not its asks.
type askTimes struct {
	mu        sync.Mutex
	windowEnd time.Time
	cur, prev [askBuckets]uint32
}

// observe records, at now, an ask answered after rtt.
func (a *askTimes) observe(now time.Time, rtt time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.roll(now)
	a.cur[min(int(max(rtt, 0)/askBucket), askBuckets-1)]++
}

// roll starts a new window if now is past the current one's end; a.mu is
// held.
func (a *askTimes) roll(now time.Time) {
	switch {
	case a.windowEnd.IsZero():
		a.windowEnd = now.Add(askWindow)
	case now.Sub(a.windowEnd) >= askWindow:
		// Two windows without asks: nothing recent is known.
		a.prev, a.cur = [askBuckets]uint32{}, [askBuckets]uint32{}
		a.windowEnd = now.Add(askWindow)
	case !now.Before(a.windowEnd):
		a.prev, a.cur = a.cur, [askBuckets]uint32{}
		a.windowEnd = a.windowEnd.Add(askWindow)
	}
}

// lead is how long before a fire time, at now, an attempt asks for its
// start: the 99th percentile of the recent asks' round trips, without
// the slowest one, taken as the upper bound of its 5 ms bucket, plus
// startLeadMargin, within [startConfirmLead, maxStartLead].
func (a *askTimes) lead(now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.roll(now)
	var n uint32
	for i := range askBuckets {
		n += a.cur[i] + a.prev[i]
	}
	if n == 0 {
		return startConfirmLead
	}
	// The 1% slowest may be answered after the fire time, and so may
	// the slowest one of a few: one ask held up (a collection, the
	// first commit of a new leader) is not how long the asks take.
	skip := n/100 + 1
	for i := askBuckets - 1; i >= 0; i-- {
		c := a.cur[i] + a.prev[i]
		if c > skip {
			return min(max(time.Duration(i+1)*askBucket+startLeadMargin, startConfirmLead), maxStartLead)
		}
		skip -= c
	}
	return startConfirmLead
}
