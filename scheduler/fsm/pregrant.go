package fsm

import (
	"errors"
	"fmt"

	"github.com/fencecron/fencecron/jobs"
)

// Granting ahead (log version 4). A run granted at its fire time pays the
// whole pipeline before its process starts: the grant's commit, the
// dispatch, the establish at the store and the lease confirmation. So the
// leader grants a scheduled run up to PreGrantLead before its fire time
// (GrantCmd.Ahead); the worker receives it, establishes its token, has
// its lease confirmed (with its start, when the short lease from the
// grant lasts until then: scheduler/worker.leaseClient.confirmAtStart),
// and starts the process from its own timer at the fire time
// (Assignment.StartAt).
// Everything that makes a grant safe is unchanged: the token is minted in
// FSM.Apply from the grant entry, the worker establishes before work, and
// (job, scheduled time) is granted once whichever leader proposes it, so a
// new leader never grants a run its predecessor granted ahead.
//
// A grant ahead must not decide differently from a grant at the fire time.
// The only input that can change in between is the job's open runs: under
// overlap forbid or replace, a run still open at the grant may end before
// the fire time. So the FSM refuses a grant ahead (ErrNotAhead, nothing
// changes) while the job has an open run and its overlap is not allow; the
// leader then grants the run at its fire time, as without ahead. The other
// inputs (a pause, a new job set) act on a granted run as they act on one
// already dispatched: a pause in the last PreGrantLead before a fire time
// does not stop that run.
//
// Failures before the fire time (prestart.go, startconfirm.go): the
// attempt holds the short lease before its start, which always outlasts
// the lead, so a dead worker's attempt expires after the fire time and
// is taken over with a newer token and no retry; the log shows its start
// was never confirmed. After a leader dies, a live worker renews with the
// new leader and starts once it confirms the start; the new leader's own
// grant of that time is refused as a duplicate.

// ErrNotAhead refuses a grant ahead of the fire time whose decision could
// still change before it: the job has an open run and overlap forbid or
// replace. It changes nothing; the leader grants the run at its fire time.
var ErrNotAhead = errors.New("not granted ahead: the job has an open run that may end before the fire time")

// DecideAhead returns nil if a grant of in's run ahead of its fire time
// decides as a grant at the fire time would, else ErrNotAhead. It is pure
// (FSM.Apply calls it for a grant marked ahead, log version 4 on).
func DecideAhead(in GrantInput) error {
	if len(in.Open) == 0 || in.Force || in.Overlap == jobs.OverlapAllow {
		return nil
	}
	return fmt.Errorf("grant %s: %w (%s)", jobs.RunID(in.Job, in.ScheduledAt), ErrNotAhead, in.Open[len(in.Open)-1].ID)
}
