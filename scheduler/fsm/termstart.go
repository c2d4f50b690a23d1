package fsm

import (
	"errors"
	"fmt"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A token's epoch is the term of its grant entry, and every reader of the
// log (fencecheck, the dashboard's epoch bands, the events) counts on the
// election entry of that epoch preceding the token. The leader loop
// commits its election entry before it grants, but Raft appends whatever
// a node proposes while it leads: a node that loses and quickly regains
// leadership can still run its previous term's loop (or serve a trigger
// through it), whose grants land in a term nobody has started. From log
// version 4 the FSM refuses such an entry whole (ErrTermNotStarted,
// nothing changes); the leader loop that meets the refusal ends, and the
// scheduler starts a fresh loop, which commits the term's election entry
// first, if the node still leads.
//
// Only entries that mint a token are refused: a start, a note or a skip
// mints nothing, nor does a completion unless it names workers for runs
// that follow the runs it finishes (after:). A refused completion is not
// lost: its worker reports it again, to the new loop. An expiry that names a takeover worker mints the takeover's
// token, so it is refused whole too, expiry included: the attempt stays
// open, and the new loop recovers its lease and expires it again.

// ErrTermNotStarted refuses an entry that would mint a token in an epoch
// whose election entry is not in the log before it.
var ErrTermNotStarted = errors.New("term not started")

// DecideTermStarted is nil unless an entry of log version `version`
// (>= 4) that mints a token (mints) is in epoch `entry` while the last
// applied election entry is of epoch `elected`. It is pure, so every
// replica refuses the same entries.
func DecideTermStarted(version int, mints bool, entry, elected uint64) error {
	if version < replicated.VersionTermStart || !mints || entry == elected {
		return nil
	}
	return fmt.Errorf("%w: epoch %d has no election entry yet (the last is epoch %d): the proposer leads a term it did not start; retry once this term's leader loop has committed its election entry",
		ErrTermNotStarted, entry, elected)
}
