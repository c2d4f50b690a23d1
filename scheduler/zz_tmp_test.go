package scheduler

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

func TestTmpSetJobs100k(t *testing.T) {
	specs := make([]jobs.Spec, 100000)
	for i := range specs {
		specs[i] = jobs.Spec{Name: fmt.Sprintf("job-%06d", i), Schedules: []string{fmt.Sprintf("%d * * * *", i%60)}, Command: []string{"/bin/true"}, Target: map[string]string{"zone": "a"}}
	}
	s := &Scheduler{}
	step := func(name string, fn func()) {
		t0 := time.Now()
		fn()
		t.Logf("%s: %v", name, time.Since(t0))
	}
	var checked []jobs.Spec
	step("check", func() {
		var err error
		checked, err = s.CheckJobs(specs)
		if err != nil {
			t.Fatal(err)
		}
	})
	step("hash", func() { jobs.HashSpecs(checked) })
	var b []byte
	step("encode", func() { b, _ = encodeEntry(command{Op: opSetJobs, SetJobs: &setJobsCmd{Jobs: checked, Source: "x"}}) })
	t.Logf("entry %d bytes", len(b))
	f := NewFSM()
	specs, checked = nil, nil
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	step("apply", func() { f.Apply(rawLog(1, 1, b)) })
	b = nil
	runtime.GC()
	runtime.ReadMemStats(&m1)
	t.Logf("FSM heap for 100k: %d MB", (m1.HeapAlloc-m0.HeapAlloc)>>20)
	checked, _, _, _ = f.JobSet()
	step("schedules", func() {
		for i := range checked {
			checked[i].Schedule()
		}
	})
	var snap []byte
	step("snapshot", func() { snap = snapshotBytes(t, f) })
	t.Logf("snapshot %d bytes", len(snap))
	step("restore", func() { snapshotRestored(t, f) })
}
