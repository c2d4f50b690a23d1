package fsm

import (
	"fmt"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// GrantVerdict is what a grant entry does.
type GrantVerdict int

// Grant verdicts.
const (
	// GrantRefused records nothing; GrantDecision.Err says why.
	GrantRefused GrantVerdict = iota
	// GrantSkipped records the run as skipped, with GrantDecision.Reason.
	GrantSkipped
	// GrantGranted grants the run's first attempt, after cancelling the
	// runs in GrantDecision.Replace.
	GrantGranted
)

// GrantInput is what a grant decision reads: the entry, and the part of
// the replicated state it concerns.
type GrantInput struct {
	Job         string
	ScheduledAt time.Time
	// Trigger is "schedule", "manual" or "catchup".
	Trigger string
	// Force overrides the overlap policy (trigger -force).
	Force bool
	// Skip is the leader's own reason not to run it (no worker matches,
	// the output key does not render), if any.
	Skip string
	// Version is the entry's log format version.
	Version int

	// Known says the job is in the replicated set; Overlap is its policy.
	Known   bool
	Overlap string
	// Existing is the run already recorded for (Job, ScheduledAt), if any.
	Existing *jobs.Run
	// Horizon is the latest scheduled time of the job's runs dropped to
	// keep the state bounded (zero if none).
	Horizon time.Time
	// Open are the job's runs that have not finished, oldest first.
	Open []jobs.Run
}

// GrantDecision is the outcome of DecideGrant.
type GrantDecision struct {
	Verdict GrantVerdict
	// Err wraps the sentinel of a refusal (ErrUnknownJob,
	// ErrDuplicateRun).
	Err error
	// Reason says why a run is skipped.
	Reason string
	// Replace lists the open runs a grant cancels first (overlap:
	// replace).
	Replace []string
	// Overrode lists the open runs a forced grant runs beside.
	Overrode []string
}

// DecideGrant decides a grant entry from the replicated state alone, so
// every replica decides the same, and no two proposals can both see
// "nothing open" (FSM.Apply calls it; entries apply one at a time):
//
//   - an unknown job is refused, and so is a (job, scheduled time) already
//     recorded or at or before the job's horizon (its run was dropped);
//   - the leader's own reason to skip is recorded as a skip;
//   - an entry of version 1 grants: its leader decided overlap itself;
//   - with no open run, or forced, or overlap allow, the run is granted;
//   - overlap replace grants after cancelling every open run;
//   - overlap forbid (the default) records the run as skipped, naming the
//     open run.
func DecideGrant(in GrantInput) GrantDecision {
	id := jobs.RunID(in.Job, in.ScheduledAt)
	switch {
	case !in.Known:
		return GrantDecision{Err: fmt.Errorf("grant %s: %w", in.Job, jobs.ErrUnknownJob)}
	case in.Existing != nil:
		return GrantDecision{Err: fmt.Errorf("grant %s: %w", id, jobs.ErrDuplicateRun)}
	case !in.Horizon.IsZero() && !in.ScheduledAt.After(in.Horizon):
		return GrantDecision{Err: fmt.Errorf("grant %s: at or before the retained horizon %s: %w", id, in.Horizon.Format(time.RFC3339), jobs.ErrDuplicateRun)}
	case in.Skip != "":
		return GrantDecision{Verdict: GrantSkipped, Reason: in.Skip}
	case in.Version < replicated.VersionDecideInApply || len(in.Open) == 0:
		return GrantDecision{Verdict: GrantGranted}
	}
	open := make([]string, len(in.Open))
	for i, r := range in.Open {
		open[i] = r.ID
	}
	switch {
	case in.Force:
		return GrantDecision{Verdict: GrantGranted, Overrode: open}
	case in.Overlap == jobs.OverlapAllow:
		return GrantDecision{Verdict: GrantGranted}
	case in.Overlap == jobs.OverlapReplace:
		return GrantDecision{Verdict: GrantGranted, Replace: open}
	}
	reason := fmt.Sprintf("previous run %s still open (overlap: forbid)", open[len(open)-1])
	if in.Trigger == "manual" {
		reason += "; trigger -force overrides it"
	}
	return GrantDecision{Verdict: GrantSkipped, Reason: reason}
}
