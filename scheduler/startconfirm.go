package scheduler

import (
	"fmt"

	"github.com/fencecron/fencecron/jobs"
)

// errStaleLoop refuses a start confirmation from a leader loop whose
// election entry is no longer the last one applied, or whose node no
// longer leads: the worker asks again, and reaches the leader.
var errStaleLoop = fmt.Errorf("this leader loop's term is over: %w", jobs.ErrNotLeader)
