package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/cmd/internal/applycache"
	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/jobs"
)

// bigJobsFile writes a jobs file of n jobs and returns its path and
// content. Files from 16 KiB read through the cache while the test runs.
func bigJobsFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	was := applycache.MinFile
	applycache.MinFile = 16 << 10
	t.Cleanup(func() { applycache.MinFile = was })
	var b bytes.Buffer
	b.WriteString("# generated\njobs:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: job-%06d\n    schedule: \"%d %d * * *\"\n    command: [\"/bin/true\"]\n", i, i%60, (i/60)%24)
	}
	path := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, b.Bytes()
}

// load is loadJobSet of path, with its cache written.
func load(t *testing.T, path string) *jobSet {
	t.Helper()
	set, err := loadJobSet(path)
	if err != nil {
		t.Fatal(err)
	}
	set.saved()
	return set
}

// sameAsWhole fails unless set names the jobs, with the digests, that
// reading path whole gives.
func sameAsWhole(t *testing.T, set *jobSet, path string) {
	t.Helper()
	specs, err := readJobSet(path)
	if err != nil {
		t.Fatal(err)
	}
	whole := wholeSet(specs)
	if !slices.Equal(set.names, whole.names) || !slices.Equal(set.digests(), whole.digests()) {
		t.Fatal("the set read through the cache is not the file's")
	}
}

// edit replaces old with new in the file at path, once.
func edit(t *testing.T, path string, data []byte, old, new string) []byte {
	t.Helper()
	if !bytes.Contains(data, []byte(old)) {
		t.Fatalf("no %q to edit", old)
	}
	data = bytes.Replace(data, []byte(old), []byte(new), 1)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return data
}

// A large file applied again is read through the cache: only the items
// it has not seen are parsed, what is sent is what reading the file whole
// gives, and anything the cache cannot vouch for reads the file whole,
// with every problem at its place.
func TestLoadJobSet_ThroughTheCache(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	const n = 2000
	path, data := bigJobsFile(t, n)

	first := load(t, path)
	if first.specs == nil {
		t.Fatal("the first read of a file went through a cache it has not written")
	}
	again := load(t, path)
	if again.specs != nil || len(again.fresh) != 2 || len(again.changed) != 0 {
		t.Fatalf("read again: whole %v, %d parsed, %d changed; want through the cache, first and last parsed, none changed", again.specs != nil, len(again.fresh), len(again.changed))
	}
	sameAsWhole(t, again, path)

	// One job in the middle changed: it alone is parsed, and sent
	// with the digests.
	data = edit(t, path, data, "name: job-001000\n    schedule: \"40 16 * * *\"", "name: job-001000\n    schedule: \"41 16 * * *\"")
	one := load(t, path)
	if one.specs != nil || len(one.changed) != 1 || one.fresh[one.changed[0]].Name != "job-001000" {
		t.Fatalf("one job changed: whole %v, changed %v", one.specs != nil, one.changed)
	}
	sameAsWhole(t, one, path)
	if again := load(t, path); again.specs != nil || len(again.changed) != 0 {
		t.Errorf("read again after the change: whole %v, %d changed; the cache did not learn the change", again.specs != nil, len(again.changed))
	}

	// A problem in a changed item is reported where the file has it.
	bad := edit(t, path, data, "name: job-001001\n    schedule: \"41 16 * * *\"", "name: job-001001\n    schedule: \"61 16 * * *\"")
	if _, err := loadJobSet(path); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s:%d:", path, 3+3*1001+1)) {
		t.Errorf("a bad schedule in a changed item: %v; want it at line %d", err, 3+3*1001+1)
	}
	// So is a name taken twice, one by a job the cache knows.
	edit(t, path, bad, "name: job-001001\n    schedule: \"61", "name: job-000005\n    schedule: \"41")
	if _, err := loadJobSet(path); err == nil || !strings.Contains(err.Error(), "already the name of the job on line") {
		t.Errorf("a name taken twice: %v", err)
	}
	// A job with after: is checked against the whole set.
	edit(t, path, data, "name: job-001001\n    schedule: \"41 16 * * *\"", "name: job-001001\n    after: [job-000001]")
	if after := load(t, path); after.specs == nil {
		t.Error("a file with a job that has after: was read through the cache")
	}
	sameAsWhole(t, load(t, path), path)
}

// A cache that says something else of the list's first item than the
// file does is not believed.
func TestLoadJobSet_CacheChecked(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	path, _ := bigJobsFile(t, 1000)
	load(t, path)
	set := load(t, path)
	if set.specs != nil {
		t.Fatal("not read through the cache")
	}
	// The cache of this file, with the first item's digest changed.
	ids, entries := cacheOf(t, path)
	entries[0].Digest = strings.Repeat("0", jobs.DigestLen)
	saveCache(t, path, ids, entries)
	if set := load(t, path); set.specs == nil {
		t.Fatal("a cache that is wrong about the first item was believed")
	}
	sameAsWhole(t, load(t, path), path)
}

// cacheOf is what the cache of the file at path should hold: each item's
// ID and entry.
func cacheOf(t *testing.T, path string) ([]applycache.ID, []applycache.Entry) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	items, ok := config.CutJobs(data)
	if !ok {
		t.Fatal("CutJobs refused the file")
	}
	whole := load(t, path)
	ids := make([]applycache.ID, items.Len())
	entries := make([]applycache.Entry, items.Len())
	for i := range ids {
		ids[i] = applycache.IDOf(items.Item(i))
		entries[i] = applycache.Entry{Name: whole.names[i], Digest: whole.digests()[i]}
	}
	return ids, entries
}

// saveCache writes the cache of the file at path.
func saveCache(t *testing.T, path string, ids []applycache.ID, entries []applycache.Entry) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	items, _ := config.CutJobs(data)
	head, tail := items.Frame()
	if err := applycache.Open(path, head, tail).Save(ids, entries); err != nil {
		t.Fatal(err)
	}
}
