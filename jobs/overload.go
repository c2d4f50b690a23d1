package jobs

import (
	"strings"
	"time"
)

// Overload is what every replica tells from the skips the leader records
// when no worker has room for a fire time (their reason starts with
// OverloadReason): since when the cluster has been shedding fire times,
// the last time it did, and how many it shed. The FSM derives it as
// entries apply and keeps it in no snapshot: a node restarted from one
// counts from there.
type Overload struct {
	Since, Last time.Time
	Skipped     uint64
}

// OverloadReason starts the reason of a fire time the leader skipped
// because every worker it may run on holds its limit of open attempts.
const OverloadReason = "overloaded:"

// OverloadQuiet is how long after the last shed fire time an overload is
// over: the next one starts another.
const OverloadQuiet = 30 * time.Second

// Note counts r if it was shed for overload, at the entry's time.
func (o *Overload) Note(r SkipRange, at time.Time) {
	if !strings.HasPrefix(r.Reason, OverloadReason) {
		return
	}
	if o.Since.IsZero() || at.Sub(o.Last) > OverloadQuiet {
		o.Since = at
	}
	o.Last = at
	o.Skipped += uint64(r.Count)
}

// Active says whether the overload is going on at now: a fire time was
// shed within OverloadQuiet.
func (o Overload) Active(now time.Time) bool {
	return !o.Last.IsZero() && now.Sub(o.Last) <= OverloadQuiet
}
