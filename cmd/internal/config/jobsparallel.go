package config

import (
	"fmt"
	"maps"

	"go.yaml.in/yaml/v3"

	"github.com/fencecron/fencecron/jobs"
)

// parallelJobs is the length of the jobs list from which its jobs are
// decoded on every core. (A variable, so that a test can have a long
// list decoded on one.)
var parallelJobs = 4096

// jobsInParallel decodes items, the jobs section's list (d.inJobs), into
// dst as jobList does, on every core: a file of 100,000 jobs spent some
// 0.3 s decoding them on one while the other waited. Each part of the
// list has a decoder of its own, which reads d's records and the jobs'
// nodes and writes nothing of d's (a job's fields are not recorded); its
// problems and findings join d's after, in the list's order.
func (d *decoder) jobsInParallel(items []*yaml.Node, path string, dst *[]jobEntry) {
	start := len(*dst)
	all := (*dst)[:start+len(items)] // jobList grew it
	isJob := make([]bool, len(items))
	forks := make([]*decoder, len(items)/512+1) // InParallel's parts at most
	jobs.InParallel(len(items), func(part, a, b int) {
		c := &decoder{
			file: d.file, lookup: d.lookup, unsetOK: d.unsetOK,
			envUsed: map[string]bool{}, failed: map[string]bool{},
			values: d.values, keys: d.keys, jobNodes: d.jobNodes, inJobs: true,
		}
		forks[part] = c
		for i := a; i < b; i++ {
			e := &all[start+i]
			*e = jobEntry{path: fmt.Sprintf("%s[%d]", path, i), line: items[i].Line}
			isJob[i] = c.job(items[i], e)
		}
	})
	for _, c := range forks {
		if c == nil {
			continue
		}
		d.probs = append(d.probs, c.probs...)
		maps.Copy(d.failed, c.failed)
		maps.Copy(d.envUsed, c.envUsed)
		d.literals = append(d.literals, c.literals...)
		d.unset = append(d.unset, c.unset...)
	}
	// What is not a job leaves no entry, as in jobList.
	n := start
	for i := range items {
		if isJob[i] {
			if n != start+i {
				all[n] = all[start+i]
			}
			n++
		}
	}
	*dst = all[:n]
}
