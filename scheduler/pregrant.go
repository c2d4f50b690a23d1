package scheduler

import (
	"errors"
	"fmt"
	"sync"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// grantAhead grants each entry's next run ahead of its fire time, in
// batches as fireMany grants due runs. An entry whose run was granted
// (or was already: a predecessor granted it ahead) gets after = next; the
// others (paused, no worker yet, an open run under forbid or replace, a
// batch neighbour sharing keys, an unknown outcome) keep it due and are
// marked aheadTried, so the run is granted at its fire time as without
// ahead.
func (l *leader) grantAhead(es []*fireEntry) {
	s := l.s
	members, load, shun := s.Raft.Members(), s.FSM.OpenLoadByWorker(), l.shunned()
	var (
		gs     = make([]replicated.GrantCmd, 0, len(es))
		owners = make([]*fireEntry, 0, len(es))
		specs  = make(map[string]jobs.Spec, len(es))
	)
	for _, e := range es {
		e.aheadTried = true
		spec, ok := s.FSM.Spec(e.name)
		if !ok || spec.Paused {
			continue
		}
		key, err := spec.OutputKey(e.next)
		picked, perr := pickWorker(members, load, spec, jobs.RunID(spec.Name, e.next), "", shun)
		if err != nil || perr != nil {
			continue // granted at its fire time, or skipped then
		}
		load[picked] += spec.AttemptLoad()
		specs[spec.Name] = spec
		gs = append(gs, replicated.GrantCmd{Job: spec.Name, ScheduledAt: e.next.UTC(), Trigger: "schedule", Output: key, Worker: picked, At: s.now(), Ahead: true})
		owners = append(owners, e)
	}
	var wg sync.WaitGroup
	for from := 0; from < len(gs); from += fsm.MaxBatchGrants {
		to := min(from+fsm.MaxBatchGrants, len(gs))
		wg.Add(1)
		go func() {
			defer wg.Done()
			chunk := gs[from:to]
			var results []fsm.ApplyResult
			if len(chunk) == 1 {
				res, err := l.propose(replicated.Command{Op: replicated.OpGrant, Grant: &chunk[0]})
				res.Err = err
				results = []fsm.ApplyResult{res}
			} else {
				res, err := l.propose(replicated.Command{Op: replicated.OpGrants, Grants: &replicated.GrantsCmd{Grants: chunk}})
				if err == nil && len(res.Batch) != len(chunk) {
					err = fmt.Errorf("batch of %d grants answered with %d results", len(chunk), len(res.Batch))
				}
				if err != nil {
					l.log.Warn("batch grant ahead failed; granting at the fire times", "runs", len(chunk), "err", err)
					return
				}
				results = res.Batch
			}
			granted := make([]worker.Assignment, 0, len(results))
			defer func() { l.dispatchAll(granted) }()
			for i, r := range results {
				g, e := chunk[i], owners[from+i]
				if errors.Is(r.Err, fsm.ErrNotAhead) || errors.Is(r.Err, fsm.ErrBatchOverlap) {
					continue
				}
				if r.Err != nil && !errors.Is(r.Err, jobs.ErrDuplicateRun) {
					l.log.Warn("grant ahead failed; granting at the fire time", "job", g.Job, "scheduled_at", g.ScheduledAt, "err", r.Err)
					continue
				}
				l.granted(specs[g.Job], g.ScheduledAt, r.Run, r.Err, len(chunk), &granted)
				e.after = e.next
			}
		}()
	}
	wg.Wait()
}
