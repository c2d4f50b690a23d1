package scheduler

import (
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// skipRanges records ranges of skipped fire times: a lone one in an
// entry of its own, more in entries of up to MaxSkipBatch.
func (l *leader) skipRanges(rs []jobs.SkipRange) {
	if len(rs) == 1 {
		l.skipRange(rs[0])
		return
	}
	for len(rs) > 0 {
		n := min(len(rs), fsm.MaxSkipBatch)
		chunk := rs[:n]
		rs = rs[n:]
		count := 0
		for i := range chunk {
			chunk[i].From, chunk[i].To = chunk[i].From.UTC(), chunk[i].To.UTC()
			count += chunk[i].Count
		}
		if _, err := l.s.applyLocalCmd(l.ctx, replicated.Command{Op: replicated.OpSkipRanges, SkipRanges: &replicated.SkipRangesCmd{Ranges: chunk, At: l.s.now()}}); err != nil {
			l.log.Error("could not record skipped fire times", "jobs", len(chunk), "count", count, "err", err)
			continue
		}
		l.log.Info("skipped fire times", "jobs", len(chunk), "count", count, "first_job", chunk[0].Job, "reason", chunk[0].Reason)
	}
}
