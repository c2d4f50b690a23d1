package fsm

import (
	"fmt"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// namespacesAllowed refuses a job set, or the jobs a difference adds, of
// an entry of a version before namespaces (replicated.VersionNamespaces)
// that holds a job of a namespace other than the default one: no binary
// of such a version wrote one, and its servers would not read it as a
// namespaced job. Nothing changes.
func namespacesAllowed(version int, specs []jobs.Spec) error {
	if version >= replicated.VersionNamespaces {
		return nil
	}
	for i := range specs {
		if ns := specs[i].NamespaceName(); ns != jobs.DefaultNamespace {
			return fmt.Errorf("job %s of namespace %s in an entry of log version %d (namespaces came with version %d): %w",
				specs[i].Name, ns, version, replicated.VersionNamespaces, jobs.ErrInvalidConfig)
		}
	}
	return nil
}
