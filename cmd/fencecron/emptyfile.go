package main

import (
	"fmt"

	"github.com/fencecron/fencecron/cmd/internal/config"
)

// checkNotEmpty refuses a file that holds no section at all: validate
// and apply say the same of it. Applied, it would remove every job, and
// it is more likely a wrong or truncated file than that wish; `jobs: []`
// says it.
func checkNotEmpty(f *config.File) error {
	for _, s := range []string{config.SectionNode, config.SectionCluster, config.SectionStore, config.SectionAPI, config.SectionJobs} {
		if f.Has(s) {
			return nil
		}
	}
	return fmt.Errorf("%s is empty (no node, cluster, store, api or jobs section): write `jobs: []` to mean a set of no jobs", f.Name)
}
