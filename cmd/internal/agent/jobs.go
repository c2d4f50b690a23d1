package agent

import (
	"fmt"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/jobs"
)

// ConfigJobs are the own jobs of the node whose config f was loaded from
// path: its jobs section's and its jobs_dir's, re-read from path on
// SIGHUP; nil if it names none. They seed a cluster that has none;
// afterwards they only replace the applied set by an operator's act
// (SIGHUP, apply).
func ConfigJobs(path string, f *config.File) (*Jobs, error) {
	if !f.Has(config.SectionJobs) && f.Node.JobsDir == "" {
		return nil, nil
	}
	set, err := f.NodeJobs()
	if err != nil {
		return nil, err
	}
	source := path
	if dir := f.JobsDirPath(); dir != "" {
		source += " and " + dir
	}
	return &Jobs{
		Specs:  set.Jobs,
		Source: fmt.Sprintf("%s on %s", source, f.Node.Name),
		Reload: func() ([]jobs.Spec, string, error) {
			g, err := config.Load(path)
			if err != nil {
				return nil, "", err
			}
			set, err := g.NodeJobs()
			if err != nil {
				return nil, "", err
			}
			return set.Jobs, fmt.Sprintf("SIGHUP: %s on %s", source, f.Node.Name), nil
		},
	}, nil
}
