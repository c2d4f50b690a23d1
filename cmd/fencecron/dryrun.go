package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// dryRun prints what `apply path` would change on the cluster c talks
// to, from the job set as it was applied, and changes nothing.
func dryRun(ctx context.Context, c *client, path string, specs []jobs.Spec, stdout io.Writer) error {
	// The diff is the answer: -json prints it, not the job set.
	var set wire.JobSet
	if err := c.call(ctx, http.MethodGet, jobSetPath+"?applied=true", nil, &set); err != nil {
		if errors.Is(err, wire.ErrUnauthorized) && c.token == "" {
			return fmt.Errorf("apply -dry-run compares the file with the applied job set, whose export needs the node's API token (api.token): "+
				"run it again with -token TOKEN or FENCECRON_API_TOKEN set (%w)", err)
		}
		return err
	}
	if len(set.Namespaces) > 0 {
		// apply would refuse the file whole: say so, not "added".
		for i := range specs {
			if ns := specs[i].NamespaceName(); !acl.MatchAny(set.Namespaces, ns) {
				return fmt.Errorf("%s: job %s is of namespace %s, outside this token's namespaces (%s): apply would refuse the file (403 missing apply)",
					path, specs[i].QualifiedName(), ns, strings.Join(set.Namespaces, ", "))
			}
		}
	}
	d := jobs.DiffSets(set.Jobs, specs)
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		// Namespaces: those a limited token's apply replaces.
		return enc.Encode(struct {
			jobs.SetDiff
			Namespaces []string `json:"namespaces,omitempty"`
		}{d, set.Namespaces})
	}
	printDiff(stdout, d, set.OperatorPaused)
	which := plural(len(set.Jobs), "job", "jobs")
	if len(set.Namespaces) > 0 {
		fmt.Fprintf(stdout, "%s\n", scopeLine(set.Namespaces, "would replace", "would keep"))
		which += " in those namespaces"
	}
	fmt.Fprintf(stdout, "dry run: %s against job set %s (%d %s): %d added, %d removed, %d changed; nothing applied\n",
		path, orNone(set.Info.Hash), len(set.Jobs), which, len(d.Added), len(d.Removed), len(d.Changed))
	return nil
}

// scopeLine says what an apply by a token limited to namespaces does.
func scopeLine(namespaces []string, replace, keep string) string {
	return fmt.Sprintf("this token applies namespaces %s only: the apply %s their jobs and %s every other namespace's as they are",
		strings.Join(namespaces, ", "), replace, keep)
}

// printDiff writes one line per added or removed job, and per changed
// field.
func printDiff(w io.Writer, d jobs.SetDiff, operatorPaused []string) {
	for _, n := range d.Added {
		fmt.Fprintf(w, "+ %s\n", n)
	}
	for _, n := range d.Removed {
		fmt.Fprintf(w, "- %s\n", n)
	}
	for _, ch := range d.Changed {
		fmt.Fprintf(w, "~ %s\n", ch.Name)
		for _, f := range ch.Fields {
			fmt.Fprintf(w, "    %s: %s → %s\n", f.Field, orAbsent(f.Old), orAbsent(f.New))
			if f.Field == "paused" && slices.Contains(operatorPaused, ch.Name) {
				fmt.Fprintf(w, "    (also paused by an operator: it stays paused until resumed)\n")
			}
		}
	}
}

func orAbsent(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}
