// Package jobstest makes job sets for tests and benchmarks.
package jobstest

import (
	"fmt"

	"github.com/fencecron/fencecron/jobs"
)

// Daily is the set `fencebench scale` applies: n jobs job-000000,
// job-000001, ..., each running /bin/true once a day at a minute of its
// own (1,440 distinct times), normalized as a leader holds them.
func Daily(n int) []jobs.Spec {
	specs := make([]jobs.Spec, n)
	for i := range specs {
		specs[i] = jobs.Spec{Name: fmt.Sprintf("job-%06d", i), Schedules: []string{fmt.Sprintf("%d %d * * *", i%60, (i/60)%24)}, Command: []string{"/bin/true"}}
		specs[i].Normalize()
	}
	return specs
}

// EveryMinute is a normalized job named name that runs shell every
// minute.
func EveryMinute(name, shell string) jobs.Spec {
	s := jobs.Spec{Name: name, Schedules: []string{"@every 1m"}, Shell: shell}
	s.Normalize()
	return s
}
