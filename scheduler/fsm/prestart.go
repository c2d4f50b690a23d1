package fsm

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// A lease before the start (log version 8). A run granted ahead of its
// fire time used to hold its job's whole lease_ttl from the grant: a
// worker that died while it waited for the fire time cost the run a
// whole lease_ttl (5 s late, measured, with the 5 s the benchmarks use).
// Nothing needs that much room before the process starts: the lease must
// only outlast a renewal's round trip. So an attempt granted ahead holds
// a short lease (jobs.Spec.PreStartLease: a third of lease_ttl, at most
// a second) until the leader confirms its start (startconfirm.go), and
// the job's whole lease_ttl from then on. Its worker renews it in the
// batches it already sends, at a third of the short TTL, and starts the
// process only with a lease that is valid at that instant and was
// confirmed within the short TTL: a worker paused across its fire time
// wakes to a lease it cannot start on, and, if the leader took the run
// over meanwhile, to a "not yours" as well.
//
// The leader says in the expiry that the lease that ran out was the
// short one (ExpireCmd.BeforeStart), and Apply decides whether that can
// be (DecidePreStartExpiry): the attempt has not started in the
// replicated state, the short lease can have run out by the entry's own
// time, and the attempt was granted in the entry's epoch after its
// election entry, by the leader loop that proposes it. That loop alone
// confirms starts in its term and remembers every one it gave, so its
// word that it gave none is good (the rule of DecideNeverStarted): the
// attempt is marked never started and its takeover, granted in the same
// entry, costs no retry. An expiry the rule refuses changes nothing; the
// leader then holds the attempt to its whole lease_ttl, as before.
//
// An attempt a leader recovers from an earlier term keeps the whole
// lease_ttl as its grace: the new leader cannot know whether its
// predecessor confirmed the start.

// ErrPreStartLeaseHeld refuses an expiry that says an attempt's short
// lease before its start ran out when the replicated state says it
// cannot have: nothing changes.
var ErrPreStartLeaseHeld = errors.New("the attempt's lease before its start cannot have run out")

// DecidePreStartExpiry returns nil if attempt a of run r may be expired
// at `at` for its short lease before the start (of length short), in an
// entry of epoch entry, while the last election entry applied is of epoch
// elected at index electedIndex; else an error wrapping
// ErrPreStartLeaseHeld. It is pure, so every replica decides the same.
func DecidePreStartExpiry(r jobs.Run, a jobs.Attempt, short time.Duration, at time.Time, entry, elected, electedIndex uint64) error {
	switch {
	case a.State != jobs.Pending || !a.StartedAt.IsZero():
		return fmt.Errorf("expire %s before its start: %w: it is %s", a.ID, ErrPreStartLeaseHeld, a.State)
	case !GrantedSinceElection(a.Token, entry, elected, electedIndex):
		return fmt.Errorf("expire %s before its start: %w: it was granted before this leader's term (token %s, epoch %d)", a.ID, ErrPreStartLeaseHeld, a.Token, entry)
	case at.Before(a.GrantedAt.Add(short)):
		return fmt.Errorf("expire %s before its start: %w: granted at %s, less than its %s lease before", a.ID, ErrPreStartLeaseHeld, a.GrantedAt.UTC().Format(time.RFC3339Nano), short)
	}
	return nil
}
