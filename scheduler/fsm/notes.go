package fsm

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Bounds on an audit entry: nodes propose them from what clients do, so
// the FSM keeps them small whatever a proposer sends.
const (
	maxAuditKind   = 32
	MaxAuditDetail = 512
)

// fsmKinds are the event kinds the FSM records from its own commands; an
// audit entry may not pose as one of them.
var fsmKinds = map[string]bool{
	jobs.EventElected: true, jobs.EventJobSet: true, jobs.EventGranted: true, jobs.EventSkipped: true,
	jobs.EventStarted: true, jobs.EventCompleted: true, jobs.EventFenced: true, jobs.EventExpired: true,
	jobs.EventCancelled: true, jobs.EventPaused: true, jobs.EventResumed: true, jobs.EventSuspect: true,
	jobs.EventLost: true, jobs.EventGrantRefused: true, jobs.EventForced: true, jobs.NoteStoreRefused: true,
	jobs.EventReleased: true, jobs.EventWaiting: true, jobs.EventAdmitted: true,
}

func (f *FSM) applyPause(l *raft.Log, p *replicated.PauseCmd) ApplyResult {
	if _, ok := f.spec(p.Job); !ok {
		return ApplyResult{Err: fmt.Errorf("pause %s: %w", p.Job, jobs.ErrUnknownJob)}
	}
	kind := jobs.EventResumed
	if p.Paused {
		f.st.Paused[p.Job] = true
		kind = jobs.EventPaused
	} else {
		delete(f.st.Paused, p.Job)
		// Resuming does not catch up on the paused time.
		f.noteScheduled(p.Job, p.At)
	}
	f.event(l, jobs.Event{Time: p.At, Kind: kind, Job: p.Job})
	return ApplyResult{}
}

// applyNote records what a node saw about an attempt. From version 2
// only known kinds are taken (jobs.NoteKinds), each counted under a fixed
// name; a store_refused note ("<outcome> <key> greatest=<epoch.seq>")
// counts in stale_refused, is kept on the attempt, and fences it if it
// already ended failed as its run's newest attempt. Version 1 counted any
// kind under its own name, and still does for its entries.
func (f *FSM) applyNote(l *raft.Log, version int, n *replicated.NoteCmd) ApplyResult {
	r, a, err := f.attempt(n.Attempt)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if version < replicated.VersionDecideInApply {
		f.st.Counters[n.Kind]++
		f.event(l, jobs.Event{Time: n.At, Kind: n.Kind, Node: n.Node, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token, Detail: n.Detail})
		return ApplyResult{Run: r.Clone()}
	}
	if err := CheckNote(n.Kind, n.Detail); err != nil {
		return ApplyResult{Run: r.Clone(), Err: err}
	}
	n.Detail = replicated.Clip(n.Detail, MaxAuditDetail)
	switch n.Kind {
	case jobs.EventSuspect:
		f.st.Counters[CounterSuspect]++
	case jobs.EventLost:
		f.st.Counters[CounterLost]++
	case jobs.NoteStoreRefused:
		outcome, rest, _ := strings.Cut(n.Detail, " ")
		key, _, _ := strings.Cut(rest, " ")
		repeated := slices.Contains(a.StoreRefusals, n.Detail)
		// A worker's completion may have counted this very refusal (its
		// own publish of the run's output) before the note came.
		counted := repeated || (a.State.Terminal() && a.StoreOutcome == outcome && key == r.Output)
		if !repeated && len(a.StoreRefusals) < replicated.MaxStoreRefusals {
			a.StoreRefusals = append(a.StoreRefusals, n.Detail)
		}
		if !counted {
			f.st.Counters[CounterStaleRefused]++
			f.st.Counters[CounterStoreRefused+outcome]++
		}
		f.event(l, jobs.Event{Time: n.At, Kind: n.Kind, Node: n.Node, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token, Detail: n.Detail})
		if a.State == jobs.Failed && isLatest(r, a) && len(a.StoreRefusals) > 0 {
			// The completion came first: the attempt was fenced all the
			// same, and gets no retry.
			f.fenceByRefusal(a)
			f.settle(r)
			f.st.Counters[CounterFenced]++
			f.event(l, jobs.Event{Time: n.At, Kind: jobs.EventFenced, Node: a.Worker, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token,
				Detail: string(a.State) + ": " + a.Error})
			f.ended(l, r, a)
		}
		return ApplyResult{Run: r.Clone()}
	}
	f.event(l, jobs.Event{Time: n.At, Kind: n.Kind, Node: n.Node, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token, Detail: n.Detail})
	return ApplyResult{Run: r.Clone()}
}

// CheckNote checks a note's kind and detail: a known kind
// (jobs.NoteKinds), and for jobs.NoteStoreRefused a detail
// "<stale_owner|expired> <key> greatest=<token>" of at most
// MaxRefusalDetail bytes (other details are cut to MaxAuditDetail bytes
// when applied). It wraps jobs.ErrInvalidConfig.
func CheckNote(kind, detail string) error {
	if !slices.Contains(jobs.NoteKinds, kind) {
		return fmt.Errorf("note of kind %q: want one of %s: %w", replicated.Clip(kind, maxAuditKind), strings.Join(jobs.NoteKinds, ", "), jobs.ErrInvalidConfig)
	}
	if kind == jobs.NoteStoreRefused {
		if len(detail) > replicated.MaxRefusalDetail {
			return fmt.Errorf("note %s: detail of %d bytes, at most %d: %w", kind, len(detail), replicated.MaxRefusalDetail, jobs.ErrInvalidConfig)
		}
		fields := strings.Fields(detail)
		if len(fields) != 3 || !refusedOutcomes[fields[0]] || !strings.HasPrefix(fields[2], "greatest=") || fields[1] == "" {
			return fmt.Errorf("note %s: detail %q: want \"<stale_owner|expired> <key> greatest=<epoch.seq>\": %w", kind, replicated.Clip(detail, 80), jobs.ErrInvalidConfig)
		}
	}
	return nil
}

// CheckAudit checks an audit entry's kind: one of jobs.AuditKinds (with
// a version 1 entry, any kind the FSM does not record itself).
func CheckAudit(kind string) error {
	if !slices.Contains(jobs.AuditKinds, kind) {
		return fmt.Errorf("audit entry of kind %q: want one of %s: %w", replicated.Clip(kind, maxAuditKind), strings.Join(jobs.AuditKinds, ", "), jobs.ErrInvalidConfig)
	}
	return nil
}

// applyAudit appends a node's audit entry: a known kind (version 2; a
// version 1 entry took any kind but the FSM's own). The detail is cut to
// MaxAuditDetail bytes.
func (f *FSM) applyAudit(l *raft.Log, version int, a *replicated.AuditCmd) ApplyResult {
	if a.Kind == "" || len(a.Kind) > maxAuditKind || fsmKinds[a.Kind] {
		return ApplyResult{Err: fmt.Errorf("audit entry of kind %q: %w", a.Kind, jobs.ErrInvalidConfig)}
	}
	if version >= replicated.VersionDecideInApply {
		if err := CheckAudit(a.Kind); err != nil {
			return ApplyResult{Err: err}
		}
	}
	if version < replicated.VersionClockSkew && a.Kind == jobs.EventClockSkew ||
		version < replicated.VersionACL && a.Kind == jobs.EventRestored {
		return ApplyResult{Err: fmt.Errorf("audit entry of kind %q in a version %d entry: %w", a.Kind, version, jobs.ErrInvalidConfig)}
	}
	detail := a.Detail
	if len(detail) > MaxAuditDetail {
		detail = strings.ToValidUTF8(detail[:MaxAuditDetail], "") + "..."
	}
	f.event(l, jobs.Event{Time: a.At, Kind: a.Kind, Node: a.Node, Detail: detail})
	return ApplyResult{}
}
