// Package jobfile reads what `fencecron apply` sends: a jobs file or a
// directory of them, checked as the node would check them, and a large
// file through the command's cache of it (applycache), so that an edit
// of a few jobs of 100,000 parses those few and sends what changed.
package jobfile

import (
	"fmt"
	"os"

	"github.com/fencecron/fencecron/cmd/internal/atomicfile"
	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/jobs"
)

// ReadSet reads what `apply` sends: a file's jobs section (with its
// node.jobs_dir's jobs, if it names one), or every job file of a
// directory (config.JobFilesIn), each file checked on its own and names
// unique across them.
func ReadSet(path string) ([]jobs.Spec, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		paths, err := config.JobFilesIn(path)
		if err != nil {
			return nil, err
		}
		set, err := config.LoadJobFiles(paths)
		if err != nil {
			return nil, err
		}
		return set.Jobs, nil
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	specs, _, err := Parse(path, data)
	return specs, err
}

// readFile reads a jobs file, up to one byte more than a file may hold
// (which the parse then refuses).
func readFile(path string) ([]byte, error) {
	data, _, err := atomicfile.ReadHuge(path, config.MaxFileSize+1)
	return data, err
}

// Parse is ReadSet of a file, whose content is data. fileOnly
// reports that the jobs are the file's own: it names no node.jobs_dir.
func Parse(path string, data []byte) (specs []jobs.Spec, fileOnly bool, err error) {
	// Only the jobs are sent, and nothing in them is ${}-expanded: the
	// node section's variables need not be set here.
	f, err := config.ParseAllowUnset(path, data)
	if err != nil {
		return nil, false, err
	}
	if err := check(path, f); err != nil {
		return nil, false, err
	}
	if f.Node.JobsDir != "" {
		// A node's config: its jobs and its jobs_dir's, as SIGHUP reads
		// them.
		set, err := f.NodeJobs()
		if err != nil {
			return nil, false, err
		}
		return set.Jobs, false, nil
	}
	return f.Jobs, true, nil
}

// check refuses a file apply cannot send: one whose jobs_dir is an
// unset variable, an empty one, and one without a jobs section (which
// would remove every job) unless it names a jobs_dir.
func check(path string, f *config.File) error {
	for _, u := range f.Unset {
		if u.Path == "node.jobs_dir" {
			return fmt.Errorf("%s", u)
		}
	}
	if err := CheckNotEmpty(f); err != nil {
		return err
	}
	if f.Node.JobsDir == "" && !f.Has(config.SectionJobs) {
		return fmt.Errorf("%s has no jobs section: applying it would remove every job; write `jobs: []` to mean that", path)
	}
	return nil
}

// CheckNotEmpty refuses a file that holds no section at all: validate
// and apply say the same of it. Applied, it would remove every job, and
// it is more likely a wrong or truncated file than that wish; `jobs: []`
// says it.
func CheckNotEmpty(f *config.File) error {
	for _, s := range []string{config.SectionNode, config.SectionCluster, config.SectionStore, config.SectionAPI, config.SectionJobs} {
		if f.Has(s) {
			return nil
		}
	}
	return fmt.Errorf("%s is empty (no node, cluster, store, api or jobs section): write `jobs: []` to mean a set of no jobs", f.Name)
}
