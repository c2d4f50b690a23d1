package config

import (
	"fmt"

	"github.com/fencecron/fencecron/jobs"
)

// checkGroups checks the top-level groups (names unique DNS labels within
// their namespace,
// max_running at least 1, max_waiting 0 to jobs.MaxGroupWaiting, default
// jobs.DefaultGroupMaxWaiting), and gives each job of the file that names
// a group that group's limits: the job set then carries every limit to
// the leader. A job naming a group the file does not define is reported
// at its group field (by jobs.Spec.Validate, in checkJobs).
func (d *decoder) checkGroups(groups []jobs.Group, entries []jobEntry) []jobs.Group {
	byName := map[string]int{}
	var out []jobs.Group
	for i := range groups {
		g := &groups[i]
		path := fmt.Sprintf("groups[%d]", i)
		if !d.has(path + ".max_waiting") {
			g.MaxWaiting = jobs.DefaultGroupMaxWaiting
		}
		ok := true
		for _, p := range g.Check() {
			fpath := path + "." + p.Field
			if !d.failed[fpath] {
				n := d.at(fpath)
				if p.Field == "max_running" && !d.has(fpath) {
					n = d.at(path)
				}
				d.errorf(n, fpath, "%s", p.Msg)
			}
			ok = false
		}
		// Names are unique within a namespace.
		if j, dup := byName[g.QualifiedName()]; dup && g.Name != "" {
			d.errorf(d.at(path+".name"), path+".name", "%q is already the name of groups[%d]", g.Name, j)
			continue
		}
		byName[g.QualifiedName()] = i
		if ok {
			out = append(out, *g)
		}
	}
	for i := range entries {
		s := &entries[i].Spec
		if s.Group == "" {
			continue
		}
		// A job's group is one of its own namespace.
		if j, ok := byName[s.Resolve(s.Group)]; ok {
			limits := groups[j]
			s.GroupLimits = &limits
		}
	}
	return out
}
