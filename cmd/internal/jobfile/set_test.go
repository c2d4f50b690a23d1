package jobfile

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
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
	return jobsFile(t, n, "# generated\n", "")
}

// jobsFile is bigJobsFile with head before "jobs:" and more after each
// job's command.
func jobsFile(t *testing.T, n int, head, more string) (string, []byte) {
	t.Helper()
	was := applycache.MinFile
	applycache.MinFile = 16 << 10
	t.Cleanup(func() { applycache.MinFile = was })
	var b bytes.Buffer
	b.WriteString(head + "jobs:\n")
	for i := range n {
		b.WriteString(jobItem(i) + more)
	}
	path := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, b.Bytes()
}

// jobItem is the item of job i in the files jobsFile writes.
func jobItem(i int) string {
	return fmt.Sprintf("  - name: job-%06d\n    schedule: \"%d %d * * *\"\n    command: [\"/bin/true\"]\n", i, i%60, (i/60)%24)
}

// load is Load of path, with its cache written.
func load(t *testing.T, path string) *Set {
	t.Helper()
	set, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	set.saved()
	return set
}

// sameAsWhole fails unless set names the jobs, with the digests, that
// reading path whole gives.
func sameAsWhole(t *testing.T, set *Set, path string) {
	t.Helper()
	specs, err := ReadSet(path)
	if err != nil {
		t.Fatal(err)
	}
	whole := wholeSet(specs)
	if !slices.Equal(set.names, whole.names) || !slices.Equal(set.digests(), whole.digests()) {
		t.Fatal("the set read through the cache is not the file's")
	}
	// Every spec, those the read parsed and those a node would ask for,
	// is the whole read's.
	all := make([]int, len(set.names))
	for i := range all {
		all[i] = i
	}
	got, ok := set.SpecsOf(all)
	if !ok {
		t.Fatal("the specs of the jobs the cache knew could not be parsed on their own")
	}
	byName := make(map[string]jobs.Spec, len(got))
	for _, s := range got {
		byName[s.Name] = s
	}
	for i, name := range set.names {
		if spec := byName[name]; !reflect.DeepEqual(spec, specs[i]) {
			t.Fatalf("job %s as parsed through the cache: %+v; read whole: %+v", name, spec, specs[i])
		}
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
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s:%d:", path, 3+3*1001+1)) {
		t.Errorf("a bad schedule in a changed item: %v; want it at line %d", err, 3+3*1001+1)
	}
	// So is a name taken twice, one by a job the cache knows.
	edit(t, path, bad, "name: job-001001\n    schedule: \"61", "name: job-000005\n    schedule: \"41")
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "already the name of the job on line") {
		t.Errorf("a name taken twice: %v", err)
	}
	// A job with after: is checked against the whole set.
	edit(t, path, data, "name: job-001001\n    schedule: \"41 16 * * *\"", "name: job-001001\n    after: [job-000001]")
	if after := load(t, path); after.specs == nil {
		t.Error("a file with a job that has after: was read through the cache")
	}
	sameAsWhole(t, load(t, path), path)
}

// What an apply sends as changes is what changed since the set the
// file's last apply made: the jobs the cache did not know, and by name
// those the file no longer has (a job edited in place is not one). The
// set is known once an apply made it, and only for the cache of the file
// that apply read.
func TestLoadJobSet_ChangesSinceTheSetApplied(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	const n = 2000
	path, data := bigJobsFile(t, n)
	// learnt waits for the cache the read is writing.
	first, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if first.cache == nil || first.base != "" {
		t.Fatalf("a first read: cache %v, base %q; want a cache to learn the set, no set known", first.cache != nil, first.base)
	}
	first.Learnt("00000000000000aa")
	if again := load(t, path); again.base != "00000000000000aa" || len(again.changed)+len(again.removed) != 0 {
		t.Fatalf("read again: base %q, %d changed, removed %v; want the set learnt, nothing changed", again.base, len(again.changed), again.removed)
	}

	// job-001000 taken out, job-001001 edited in place, job-001002
	// renamed.
	data = edit(t, path, data, jobItem(1000), "")
	data = edit(t, path, data, jobItem(1001), strings.Replace(jobItem(1001), "* * *", "* * 1", 1))
	edit(t, path, data, jobItem(1002), strings.Replace(jobItem(1002), "job-001002", "job-901002", 1))
	set, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var changed []string
	for _, k := range set.changed {
		changed = append(changed, set.fresh[k].Name)
	}
	slices.Sort(set.removed)
	if set.base != "00000000000000aa" || !slices.Equal(changed, []string{"job-001001", "job-901002"}) || !slices.Equal(set.removed, []string{"job-001000", "job-001002"}) {
		t.Errorf("after the edits: base %q, changed %v, removed %v; want the set learnt, job-001001 and job-901002 changed, job-001000 and job-001002 removed", set.base, changed, set.removed)
	}
	sameAsWhole(t, set, path)
	// The cache now holds the edited file: the set learnt is not its.
	set.saved()
	if again := load(t, path); again.base != "" {
		t.Errorf("the cache of the edited file has base %q before an apply of it", again.base)
	}
	set.Learnt("00000000000000bb")
	if again := load(t, path); again.base != "00000000000000bb" {
		t.Errorf("after the edited file's apply: base %q, want its set", again.base)
	}
}

// Items moved in the file are known where they now are: a job added
// before all the others, and more items moved than the cache finds
// without its index, change nothing but the job added.
func TestLoadJobSet_ItemsMoved(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	const n = 2000
	path, data := bigJobsFile(t, n)
	load(t, path).Learnt("00000000000000aa")
	// Items 100, 110, ... 590 taken out and put back after item 1500,
	// in the other order; a job added first.
	var moved string
	for i := 590; i >= 100; i -= 10 {
		data = edit(t, path, data, jobItem(i), "")
		moved += jobItem(i)
	}
	data = edit(t, path, data, jobItem(1500), jobItem(1500)+moved)
	edit(t, path, data, "jobs:\n", "jobs:\n  - name: added\n    schedule: \"@daily\"\n    command: [\"/bin/true\"]\n")
	set := load(t, path)
	var changed []string
	for _, k := range set.changed {
		changed = append(changed, set.fresh[k].Name)
	}
	if set.specs != nil || !slices.Equal(changed, []string{"added"}) || len(set.removed) != 0 {
		t.Fatalf("whole %v, changed %v, removed %v; want through the cache, only the job added changed", set.specs != nil, changed, set.removed)
	}
	sameAsWhole(t, set, path)
	if again := load(t, path); again.specs != nil || len(again.changed)+len(again.removed) != 0 {
		t.Errorf("read again: whole %v, %d changed, %d removed; the cache did not learn the file", again.specs != nil, len(again.changed), len(again.removed))
	}
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

	// Wrong about a job in the middle, which the read does not parse: a
	// node that lacks it has it parsed, and the parse disagrees.
	ids, entries = cacheOf(t, path)
	entries[500].Digest = strings.Repeat("0", jobs.DigestLen)
	saveCache(t, path, ids, entries)
	set = load(t, path)
	if set.specs != nil {
		t.Fatal("not read through the cache")
	}
	if _, ok := set.SpecsOf([]int{500}); ok {
		t.Error("a job whose parse is not what the cache said was taken")
	}
	if specs, ok := set.SpecsOf([]int{501, 499}); !ok || len(specs) != 2 || specs[0].Name != "job-000499" {
		t.Errorf("the jobs around it: %v, %v", specs, ok)
	}
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
	if err := applycache.Load(path).Open(head, tail, os.LookupEnv).Save(ids, nil, func(i int) applycache.Entry { return entries[i] }); err != nil {
		t.Fatal(err)
	}
}

// A variable the file around the list names decides what its jobs may
// be: with another value, the file is read whole and checked again.
func TestLoadJobSet_VariablesOfTheFrame(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("MAX_BODY", "4000")
	path, data := jobsFile(t, 1000, "store:\n  max_body_bytes: ${MAX_BODY}\n", "    max_output_bytes: 500\n")
	// One job in the middle, which the cache knows, may write 2000 bytes.
	edit(t, path, data, "name: job-000500\n    schedule: \"20 8 * * *\"\n    command: [\"/bin/true\"]\n    max_output_bytes: 500\n",
		"name: job-000500\n    schedule: \"20 8 * * *\"\n    command: [\"/bin/true\"]\n    max_output_bytes: 2000\n")
	load(t, path)
	if set := load(t, path); set.specs != nil {
		t.Fatal("not read through the cache")
	}
	t.Setenv("MAX_BODY", "1000")
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "more than store.max_body_bytes (1000)") {
		t.Errorf("with store.max_body_bytes below the jobs' max_output_bytes: %v", err)
	}
}

// A job whose check reads its CA file is checked every time, and is not
// taken for a change when it did not change.
func TestLoadJobSet_CAFileCheckedEachTime(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	srv := httptest.NewTLSServer(nil)
	srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	path, data := bigJobsFile(t, 1000)
	edit(t, path, data, "  - name: job-000500\n    schedule: \"20 8 * * *\"\n    command: [\"/bin/true\"]\n",
		"  - name: job-000500\n    schedule: \"20 8 * * *\"\n    http: {url: \"https://127.0.0.1:1/\", ca_file: "+ca+"}\n")
	load(t, path)
	set := load(t, path)
	if set.specs != nil || len(set.changed) != 0 {
		t.Fatalf("read again: whole %v, changed %v; want through the cache, nothing changed", set.specs != nil, set.changed)
	}
	if _, ok := set.parsed["job-000500"]; !ok {
		t.Error("the job with a CA file was not parsed again")
	}
	sameAsWhole(t, set, path)
	os.Remove(ca)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "cannot read the CA file") {
		t.Errorf("with its CA file gone: %v", err)
	}
}

// BenchmarkLoadJobSet_OneChange is what `fencecron apply` of a file of
// 100,000 jobs spends reading it when the cache knows all of it but one
// edited job (and reads nothing else). A fresh command pays more: its
// heap is new, and each page of it a fault.
func BenchmarkLoadJobSet_OneChange(b *testing.B) {
	b.Setenv("XDG_CACHE_HOME", b.TempDir())
	var buf bytes.Buffer
	buf.WriteString("jobs:\n")
	for i := range 100_000 {
		buf.WriteString(jobItem(i))
	}
	path := filepath.Join(b.TempDir(), "jobs.yaml")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	set, err := Load(path)
	if err != nil {
		b.Fatal(err)
	}
	set.saved()
	// Two edits of one job, applied in turn: each read finds the other's
	// cache.
	edits := [2][]byte{}
	for k, to := range []string{"21 17", "22 17"} {
		edits[k] = bytes.Replace(buf.Bytes(), []byte("job-050000\n    schedule: \"20 17"), []byte("job-050000\n    schedule: \""+to), 1)
	}
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		b.StopTimer()
		if err := os.WriteFile(path, edits[k%2], 0o600); err != nil {
			b.Fatal(err)
		}
		k++
		b.StartTimer()
		set, err := Load(path)
		if err != nil || set.specs != nil || len(set.changed) != 1 {
			b.Fatalf("%v: want one job changed, read through the cache", err)
		}
		b.StopTimer()
		set.saved()
		b.StartTimer()
	}
}
