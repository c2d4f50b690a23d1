package scheduler

// This file is a stand-in for the typed forwarding the scheduler's own
// rework of issue 12 brings (Scheduler implements Forwarder and has
// Local): it exists so the transport (scheduler/rpc) builds and is tested
// against the Forwarder interface on its own branch. When both land,
// delete this file and keep that rework.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

var _ Forwarder = (*Scheduler)(nil)

// forwardable lists the commands a follower may send to the leader.
// Elections and grants are the leader's own and are never forwarded.
var forwardable = map[string]bool{opSetJobs: true, opStart: true, opComplete: true, opPause: true, opNote: true, opAudit: true}

// forward sends c to the leader as the typed call it stands for.
func (s *Scheduler) forward(ctx context.Context, c command) (applyResult, error) {
	var err error
	switch c.Op {
	case opSetJobs:
		_, err = s.Forwarder.SetJobs(ctx, c.SetJobs.Jobs, c.SetJobs.Source)
	case opStart:
		err = s.Forwarder.Started(ctx, c.Start.Attempt, c.Start.At)
	case opComplete:
		err = s.Forwarder.Complete(ctx, *c.Complete)
	case opPause:
		err = s.Forwarder.Pause(ctx, c.Pause.Job, c.Pause.Paused)
	case opNote:
		err = s.Forwarder.Note(ctx, c.Note.Attempt, c.Note.Kind, c.Note.Node, c.Note.Detail)
	case opAudit:
		err = s.Forwarder.Audit(ctx, c.Audit.Kind, c.Audit.Node, c.Audit.Detail)
	default:
		err = fmt.Errorf("command %q cannot be forwarded: %w", c.Op, jobs.ErrInvalidConfig)
	}
	if err != nil {
		return applyResult{}, fmt.Errorf("forward %s to the leader: %w", c.Op, err)
	}
	return applyResult{}, nil
}

// Local answers only as the leader, and never forwards: jobs.ErrNotLeader
// on a node that does not lead, so the caller looks for the leader again.
// The transport's server calls it.
func (s *Scheduler) Local() Forwarder { return leaderOnly{s} }

// leaderOnly is Scheduler.Local.
type leaderOnly struct{ s *Scheduler }

func (l leaderOnly) apply(ctx context.Context, c command) error {
	if !l.s.Raft.IsLeader() {
		return fmt.Errorf("%s: %w", c.Op, jobs.ErrNotLeader)
	}
	_, err := l.s.applyLocalCmd(ctx, c)
	return err
}

func (l leaderOnly) SetJobs(ctx context.Context, specs []jobs.Spec, source string) (string, error) {
	specs = slices.Clone(specs)
	for i := range specs {
		specs[i].Normalize()
	}
	if err := jobs.CheckSet(specs); err != nil {
		return "", err
	}
	if err := l.apply(ctx, command{Op: opSetJobs, SetJobs: &setJobsCmd{Jobs: specs, Source: source, At: l.s.now()}}); err != nil {
		return "", err
	}
	return jobs.HashSpecs(specs), nil
}

func (l leaderOnly) Trigger(ctx context.Context, job string, force bool) (jobs.Run, error) {
	return l.s.TriggerLocal(ctx, job)
}

func (l leaderOnly) Pause(ctx context.Context, job string, paused bool) error {
	return l.apply(ctx, command{Op: opPause, Pause: &pauseCmd{Job: job, Paused: paused, At: l.s.now()}})
}

func (l leaderOnly) Started(ctx context.Context, attempt string, at time.Time) error {
	return l.apply(ctx, command{Op: opStart, Start: &startCmd{Attempt: attempt, At: at.UTC()}})
}

func (l leaderOnly) Complete(ctx context.Context, c Completion) error {
	return l.apply(ctx, command{Op: opComplete, Complete: &c})
}

func (l leaderOnly) Note(ctx context.Context, attempt, kind, node, detail string) error {
	return l.apply(ctx, command{Op: opNote, Note: &noteCmd{Attempt: attempt, Kind: kind, Node: node, Detail: detail, At: l.s.now()}})
}

func (l leaderOnly) Audit(ctx context.Context, kind, node, detail string) error {
	return l.apply(ctx, command{Op: opAudit, Audit: &auditCmd{Kind: kind, Node: node, Detail: detail, At: l.s.now()}})
}

func (l leaderOnly) Renew(ctx context.Context, attempt, node string) (RenewReply, error) {
	return l.s.RenewLocal(attempt, node)
}
