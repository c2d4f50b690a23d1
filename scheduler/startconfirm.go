package scheduler

import (
	"fmt"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// errStaleLoop refuses a start confirmation from a leader loop whose
// election entry is no longer the last one applied, or whose node no
// longer leads: the worker asks again, and reaches the leader.
var errStaleLoop = fmt.Errorf("this leader loop's term is over: %w", jobs.ErrNotLeader)

// startConfirmLead is how long before an attempt's fire time its worker
// asks the leader to confirm the start: about a renewal's round trip on
// a busy node.
const startConfirmLead = 25 * time.Millisecond

// Renewal is one attempt's renewal in a RenewMany.
type Renewal struct {
	Attempt string
	// Start asks the leader to confirm that the worker starts the
	// attempt's process now (RenewReply.Started).
	Start bool
	// Confirming says the worker asks before starting: a leader may
	// then take a lease that ran out without Start for an attempt that
	// never started.
	Confirming bool
}
