package scheduler

import (
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
)

// After the job set changes, the firing queue keeps the entry of each job
// whose timing did not change, with what this term handled of it, and
// starts the others as a new leader would: a changed schedule or jitter,
// or a job its file resumes, starts afresh; a removed job leaves, a new
// one joins.
func TestLeader_RefreshQueueKeepsWhatDidNotChange(t *testing.T) {
	every := func(name string) jobs.Spec { return spec(name, jobs.MisfireLatest, jobs.OverlapAllow) }
	paused := every("resumed")
	paused.Paused = true
	l, _ := newTestLeader(t, every("same"), every("command"), every("schedule"), every("jitter"), every("removed"), paused)
	q := l.buildQueue()
	before := map[string]*fireEntry{}
	for _, e := range q {
		before[e.name] = e
	}
	if len(before) != 6 {
		t.Fatalf("the first queue holds %d jobs, want 6", len(before))
	}
	// What this term handled: jobs fired (or, paused, walked past) up to
	// base+5s, past what the replicated state says of them.
	handled := base.Add(5 * time.Second)
	for _, name := range []string{"same", "command", "resumed"} {
		e := before[name]
		e.after = handled
		e.setNext(e.sched.Next(handled))
	}

	command, schedule, jitter := every("command"), every("schedule"), every("jitter")
	command.Shell = "false"
	schedule.Schedules = []string{"*/2 * * * * *"}
	jitter.Jitter = jobs.Duration(500 * time.Millisecond)
	if _, err := l.s.SetJobs(t.Context(), []jobs.Spec{every("same"), command, schedule, jitter, every("added"), every("resumed")}, "test", nil); err != nil {
		t.Fatal(err)
	}
	q = l.refreshQueue(q)

	after := map[string]*fireEntry{}
	for i, e := range q {
		after[e.name] = e
		if i > 0 && q[i].wakeAt().Before(q[0].wakeAt()) {
			t.Errorf("%s wakes at %s, before the queue's head %s at %s: not a heap", e.name, e.wakeAt(), q[0].name, q[0].wakeAt())
		}
	}
	for _, name := range []string{"same", "command"} {
		if e := after[name]; e != before[name] || !e.after.Equal(handled) {
			t.Errorf("%s: entry %+v, want the one it had, handled up to %s", name, e, handled)
		}
	}
	for _, name := range []string{"schedule", "jitter", "added", "resumed"} {
		e := after[name]
		if e == nil || e == before[name] || !e.after.Equal(base) {
			t.Fatalf("%s: entry %+v, want a new one starting at %s", name, e, base)
		}
	}
	if want := base.Add(2 * time.Second); !after["schedule"].next.Equal(want) {
		t.Errorf("schedule's next time %s, want %s from its new schedule", after["schedule"].next, want)
	}
	if after["jitter"].jitter != jitter.Jitter {
		t.Errorf("jitter's entry has jitter %s, want %s", after["jitter"].jitter, jitter.Jitter)
	}
	if e, ok := after["removed"]; ok {
		t.Errorf("a removed job is still queued: %+v", e)
	}
	if len(q) != 6 {
		t.Errorf("the queue holds %d jobs, want 6", len(q))
	}
}

// BenchmarkLeader_QueueAfterOneChange is what the firing loop does, firing
// nothing meanwhile, after one job of 100,000 changed: build the queue
// anew (its parsed schedules kept from the build before), or bring the
// queue of the set before up to date.
func BenchmarkLeader_QueueAfterOneChange(b *testing.B) {
	specs := jobstest.Daily(100_000)
	l, _ := newTestLeader(b, specs...)
	q := l.buildQueue() // of the set before the change
	specs[500].Schedules = []string{"*/5 * * * *"}
	if _, err := l.s.SetJobs(b.Context(), specs, "bench", nil); err != nil {
		b.Fatal(err)
	}
	b.Run("build", func(b *testing.B) {
		for b.Loop() {
			l.buildQueue()
		}
	})
	b.Run("refresh", func(b *testing.B) {
		for b.Loop() {
			if fresh := l.refreshQueue(q); len(fresh) != len(specs) {
				b.Fatalf("%d jobs queued, want %d", len(fresh), len(specs))
			}
		}
	})
}
