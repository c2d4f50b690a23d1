package history

import (
	"slices"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

// A namespace's runs, from the file and the hot window, a page at a time.
func TestStore_ListRunsByNamespace(t *testing.T) {
	s, _ := MustOpen(t, jobs.History{Runs: 1000}, "")
	var stored []jobs.Run
	for i := range 5 {
		stored = append(stored, run("a", i, jobs.Succeeded), run("billing:a", i, jobs.Succeeded), run("billing:b", i, jobs.Failed))
	}
	s.Archive(1, stored, nil)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	hot := []jobs.Run{run("a", 10, jobs.Running), run("billing:a", 10, jobs.Running)}
	for ns, want := range map[string]int{"billing": 11, "default": 6, "sales": 0} {
		var all []string
		cursor := ""
		for range 50 {
			page, err := s.ListRuns(slices.Clone(hot), RunQuery{Namespace: ns, Limit: 2, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Runs {
				if n, _ := jobs.SplitQualified(r.Job); n != ns {
					t.Errorf("namespace %s: listed %s", ns, r.ID)
				}
			}
			all = append(all, ids(page.Runs)...)
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		if len(all) != want {
			t.Errorf("namespace %s: %d runs %v, want %d", ns, len(all), all, want)
		}
	}
}
