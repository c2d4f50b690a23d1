package fsm

import (
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Notifications (jobs.Spec.Notify, log version 4). Which transitions are
// notified is decided in the entry that makes them (DecideNotices): each
// becomes a Notice in the replicated state, pending until the leader
// records its delivery, or that it gave up, through the log
// (OpNotified). A new leader sends only what is still pending, so a
// delivery recorded is never sent again. What no log can close is the
// moment between a target's answer and the commit of its record: a
// leader that dies there leaves the notice pending and its successor
// sends it again. Every notice has a stable id (Notice.Key) that each
// target receives (webhook: the id field and a Fencecron-Notification-Id
// header; email: the Message-ID), so a receiver can drop the repeat.

// Counters of notifications.
const (
	CounterNotified     = "notified"
	CounterNotifyFailed = "notify_failed"
)

// failedStates are the ends after which a success is "recovered".
var failedStates = map[jobs.State]bool{jobs.Failed: true, jobs.TimedOut: true, jobs.Lost: true, jobs.Fenced: true}

// DecideNotices returns the notices due when attempt att of run r ended
// (att nil: the run was recorded skipped, without an attempt), for the
// job's notify list; prev is the final state of the job's previous
// finished run (for recovered). An entry that wants both the state and
// recovered gets one notice, as recovered. IDs and Index are left for
// the caller.
func DecideNotices(list []jobs.Notify, r *jobs.Run, att *jobs.Attempt, prev jobs.State) []replicated.Notice {
	if len(list) == 0 {
		return nil
	}
	st := jobs.Skipped
	if att != nil {
		st = att.State
	} else if r.State != jobs.Skipped {
		return nil
	}
	recovered := r.State == jobs.Succeeded && failedStates[prev]
	var out []replicated.Notice
	for _, n := range list {
		var state string
		switch {
		case recovered && n.Wants(jobs.NotifyRecovered):
			state = jobs.NotifyRecovered
		case n.Wants(string(st)):
			state = string(st)
		default:
			continue
		}
		target := n
		target.On = nil
		no := replicated.Notice{State: state, RunState: r.State, Job: r.Job, Run: r.ID, Final: r.State.Terminal(),
			ScheduledAt: r.ScheduledAt, Reason: r.Reason, Target: target}
		if att != nil {
			no.Attempt, no.Number, no.Worker, no.Error = att.ID, att.Number, att.Worker, replicated.Clip(att.Error, 1024)
			tok := att.Token
			no.Token = &tok
			if att.ExitCode != nil {
				code := *att.ExitCode
				no.ExitCode = &code
			}
		}
		out = append(out, no)
	}
	return out
}

// noticeEnded records the notices due for an attempt's end (or a
// skipped run), and, when the run finished, its state as the job's
// previous one for the next recovered.
func (f *FSM) noticeEnded(l *raft.Log, r *jobs.Run, att *jobs.Attempt, at time.Time) {
	spec, ok := f.spec(r.Job)
	if ok {
		for _, n := range DecideNotices(spec.Notify, r, att, f.st.LastFinal[r.Job]) {
			f.st.NoticeSeq++
			n.ID, n.Index, n.At = f.st.NoticeSeq, l.Index, at
			f.st.Notices = append(f.st.Notices, n)
		}
		if over := len(f.st.Notices) - replicated.MaxNotices; over > 0 {
			for _, n := range f.st.Notices[:over] {
				f.st.Counters[CounterNotifyFailed]++
				f.event(l, jobs.Event{Time: at, Kind: jobs.EventNotifyFailed, Job: n.Job, Run: n.Run, Attempt: n.Attempt,
					Detail: fmt.Sprintf("%s notice %s (%s) dropped unsent: more than %d notices pending", n.Kind(), n.Key(), n.State, replicated.MaxNotices)})
			}
			f.st.Notices = slices.Delete(f.st.Notices, 0, over)
		}
	}
	if r.State.Terminal() && r.State != jobs.Cancelled {
		if f.st.LastFinal == nil {
			f.st.LastFinal = map[string]jobs.State{}
		}
		f.st.LastFinal[r.Job] = r.State
	}
}

// applyNotified records deliveries: each notice named leaves the pending
// list, delivered (event notified) or given up on (event notify_failed).
// A notice already recorded is left alone, so a repeated record changes
// nothing.
func (f *FSM) applyNotified(l *raft.Log, c *replicated.NotifiedCmd) ApplyResult {
	for _, d := range c.Deliveries {
		i := slices.IndexFunc(f.st.Notices, func(n replicated.Notice) bool { return n.ID == d.ID })
		if i < 0 {
			continue
		}
		n := f.st.Notices[i]
		f.st.Notices = slices.Delete(f.st.Notices, i, i+1)
		e := jobs.Event{Time: c.At, Job: n.Job, Run: n.Run, Attempt: n.Attempt}
		if d.Error == "" {
			f.st.Counters[CounterNotified]++
			e.Kind = jobs.EventNotified
			e.Detail = fmt.Sprintf("%s notice %s (%s) delivered after %d tries", n.Kind(), n.Key(), n.State, d.Tries)
		} else {
			f.st.Counters[CounterNotifyFailed]++
			e.Kind = jobs.EventNotifyFailed
			e.Detail = fmt.Sprintf("%s notice %s (%s) given up after %d tries: %s", n.Kind(), n.Key(), n.State, d.Tries, replicated.Clip(d.Error, MaxAuditDetail))
		}
		f.event(l, e)
	}
	return ApplyResult{}
}

// Notices returns the notices pending delivery, oldest first.
func (f *FSM) Notices() []replicated.Notice {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]replicated.Notice, len(f.st.Notices))
	copy(out, f.st.Notices)
	return out
}
