package e2e

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// writeJobFiles writes n jobs named job-000000... over files job files
// in dir, each job four lines after the file's `jobs:` line.
func writeJobFiles(t *testing.T, dir string, n, files int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	per := n / files
	for f := range files {
		var b bytes.Buffer
		b.WriteString("jobs:\n")
		for i := f * per; i < (f+1)*per; i++ {
			fmt.Fprintf(&b, "  - name: job-%06d\n    schedule: \"%d %d * * *\"\n    command: [\"/bin/true\"]\n    target: {zone: z%d}\n", i, i%60, (i/60)%24, i%7)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part-%02d.yaml", f)), b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// applyCLI runs `fencecron apply` as a user would, a process of its own.
func applyCLI(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	return cliWithin(t, 3*time.Minute, env, append([]string{"apply"}, args...)...)
}

// A dev node takes 100,000 jobs from a directory of job files: a bad file
// is reported at its own line and column and changes nothing; the good
// set applies; the Jobs page stays one small page and finds any job; the
// API pages by cursor. How fast is fencebench scale's to say.
func TestDev_HundredThousandJobs(t *testing.T) {
	t.Parallel()
	const n = 100000
	dataDir := t.TempDir()
	httpPort, raftPort, gossipPort := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)
	dev := startDev(t, dataDir, httpPort, raftPort, gossipPort)
	addr := strings.TrimPrefix(dev.base, "http://")
	status := func() wire.Status {
		t.Helper()
		var st wire.Status
		if err := proctest.GetJSON(dev.base+"/api/v1/status", &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	proctest.Eventually(t, 30*time.Second, "the example jobs applied", func() error {
		var st wire.Status
		if err := proctest.GetJSON(dev.base+"/api/v1/status", &st); err != nil {
			return err
		}
		if st.Jobs.Count == 0 {
			return fmt.Errorf("no job set yet")
		}
		return nil
	})
	before := status().Jobs

	dir := filepath.Join(t.TempDir(), "jobs.d")
	writeJobFiles(t, dir, n, 4)

	t.Run("a bad file is reported at its position and changes nothing", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.d")
		writeJobFiles(t, bad, 40, 4)
		// part-02.yaml's second job gets a minute out of range: line 7
		// (the job's schedule), column 15 (the value).
		p := filepath.Join(bad, "part-02.yaml")
		b, _ := os.ReadFile(p)
		b = bytes.Replace(b, []byte(`schedule: "21 0 * * *"`), []byte(`schedule: "61 0 * * *"`), 1)
		os.WriteFile(p, b, 0o600)
		out, err := applyCLI(t, nil, "-addr", addr, bad)
		if err == nil || !strings.Contains(out, p+":7:15") {
			t.Fatalf("apply of a directory with a bad file: err %v, output:\n%s", err, out)
		}
		if strings.Contains(out, "part-01.yaml") {
			t.Errorf("a good file is reported:\n%s", out)
		}
		if after := status().Jobs; after.Hash != before.Hash || after.Count != before.Count {
			t.Errorf("after a refused apply the job set is %+v, was %+v", after, before)
		}
	})

	t.Run("apply DIR", func(t *testing.T) {
		start := time.Now()
		out, err := applyCLI(t, nil, "-addr", addr, dir)
		if err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		t.Logf("apply of %d jobs (4 files): %s; see fencebench scale for speed", n, time.Since(start).Round(time.Millisecond))
		if !strings.Contains(out, fmt.Sprintf("applied %d jobs", n)) {
			t.Errorf("apply printed %q", out)
		}
		if st := status(); st.Jobs.Count != n {
			t.Fatalf("the node has %d jobs, want %d", st.Jobs.Count, n)
		}
	})

	t.Run("one job changed is a difference of one job", func(t *testing.T) {
		p := filepath.Join(dir, "part-01.yaml")
		b, _ := os.ReadFile(p)
		job := fmt.Sprintf("  - name: job-%06d\n    schedule: \"%d %d * * *\"\n    command: [\"/bin/true\"]", 30000, 30000%60, (30000/60)%24)
		if !bytes.Contains(b, []byte(job)) {
			t.Fatalf("%s lacks %q", p, job)
		}
		os.WriteFile(p, bytes.Replace(b, []byte(job), []byte(strings.Replace(job, "/bin/true", "/bin/false", 1)), 1), 0o600)
		before := status().Jobs
		sizeBefore := dirSize(t, dataDir)
		start := time.Now()
		out, err := applyCLI(t, nil, "-addr", addr, dir)
		if err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		took := time.Since(start)
		if want := fmt.Sprintf("sent 1 new or changed job whole; the node had the other %d\n", n-1); !strings.Contains(out, want) {
			t.Errorf("apply said %q; want %q: the changed job alone sent whole", out, want)
		}
		// The whole set (about 30 MB) appended again would grow the
		// node's data by as much; a difference of one job, by nothing a
		// user would notice.
		grew := dirSize(t, dataDir) - sizeBefore
		t.Logf("apply of %d jobs, one changed: %s; the data directory grew by %d KiB", n, took.Round(time.Millisecond), grew>>10)
		if grew > 4<<20 {
			t.Errorf("one changed job grew the node's data by %d KiB; want at most 4 MiB", grew>>10)
		}
		after := status().Jobs
		if after.Count != n || after.Hash == before.Hash {
			t.Fatalf("after the change: %d jobs of hash %s (was %s); want %d, a new hash", after.Count, after.Hash, before.Hash, n)
		}
		// The log's own record of the apply: one job changed, none
		// removed, in the entry with the new hash.
		var events wire.EventList
		if err := proctest.GetJSON(dev.base+"/api/v1/events?limit=1000", &events); err != nil {
			t.Fatal(err)
		}
		var detail string
		for _, e := range events.Events {
			if e.Kind == jobs.EventJobSet && strings.Contains(e.Detail, after.Hash) {
				detail = e.Detail
			}
		}
		if !strings.HasSuffix(detail, ": 1 added or changed, 0 removed") {
			t.Errorf("the job set event of the change: %q; want a difference of one job", detail)
		}
	})

	// That the edited file is read through the cache (only the edited
	// item parsed) is TestLoadJobSet_ThroughTheCache's to show; here, a
	// real command and node end where reading the file whole ends.
	t.Run("one file, one job edited: read through the command's cache", func(t *testing.T) {
		// The same jobs in one file of some 10 MB, as the set now is.
		var b bytes.Buffer
		b.WriteString("jobs:\n")
		for _, part := range []string{"part-00.yaml", "part-01.yaml", "part-02.yaml", "part-03.yaml"} {
			data, err := os.ReadFile(filepath.Join(dir, part))
			if err != nil {
				t.Fatal(err)
			}
			b.Write(bytes.TrimPrefix(data, []byte("jobs:\n")))
		}
		file := filepath.Join(t.TempDir(), "jobs.yaml")
		if err := os.WriteFile(file, b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		cache := filepath.Join(t.TempDir(), "cache")
		env := []string{"XDG_CACHE_HOME=" + cache}
		if out, err := applyCLI(t, env, "-addr", addr, file); err != nil || !strings.Contains(out, fmt.Sprintf("the node had the other %d", n)) {
			t.Fatalf("apply of the set as one file: %v\n%s", err, out)
		}
		caches, _ := filepath.Glob(filepath.Join(cache, "fencecron", "apply", "*.cache"))
		if len(caches) != 1 {
			t.Fatalf("after the apply, the cache holds %v; want the file's cache", caches)
		}
		learnt, _ := os.ReadFile(caches[0])
		// A job in the middle, edited in place.
		job := "  - name: job-050000\n    schedule: \"20 17 * * *\"\n    command: [\"/bin/true\"]"
		if !bytes.Contains(b.Bytes(), []byte(job)) {
			t.Fatalf("the file lacks %q", job)
		}
		os.WriteFile(file, bytes.Replace(b.Bytes(), []byte(job), []byte(strings.Replace(job, "/bin/true", "/bin/false", 1)), 1), 0o600)
		// The command knows the set its last apply made: it sends the
		// change alone, against that set.
		base := status().Jobs.Hash
		out, err := applyCLI(t, env, "-addr", addr, file)
		if want := fmt.Sprintf("sent the changes since job set %s: 1 new or changed job whole, 0 removed; the node had the other %d\n", base, n-1); err != nil || !strings.Contains(out, want) {
			t.Fatalf("apply of the edited file: %v: %q; want %q", err, out, want)
		}
		if now, _ := os.ReadFile(caches[0]); bytes.Equal(now, learnt) {
			t.Error("the file's cache did not learn the edited job")
		}
		// What was applied is what the file says: a dry run, which
		// reads the file whole, finds nothing to change.
		out, err = applyCLI(t, env, "-dry-run", "-addr", addr, file)
		if err != nil || !strings.Contains(out, ": 0 added, 0 removed, 0 changed; nothing applied") {
			t.Errorf("a dry run after the apply: %v\n%s", err, out)
		}
		var got wire.Job
		if err := proctest.GetJSON(dev.base+"/api/v1/jobs/job-050000", &got); err != nil || !slices.Equal(got.Command, []string{"/bin/false"}) {
			t.Errorf("job-050000's command is %q (%v), want the edited one", got.Command, err)
		}

		// A job taken out of the file is removed by name.
		edited, _ := os.ReadFile(file)
		gone := "  - name: job-050001\n    schedule: \"21 17 * * *\"\n    command: [\"/bin/true\"]\n    target: {zone: z0}\n"
		if !bytes.Contains(edited, []byte(gone)) {
			t.Fatalf("the file lacks %q", gone)
		}
		os.WriteFile(file, bytes.Replace(edited, []byte(gone), nil, 1), 0o600)
		base = status().Jobs.Hash
		out, err = applyCLI(t, env, "-addr", addr, file)
		if want := fmt.Sprintf("sent the changes since job set %s: 0 new or changed jobs whole, 1 removed; the node had the other %d\n", base, n-1); err != nil || !strings.Contains(out, want) {
			t.Fatalf("apply of the file without job-050001: %v: %q; want %q", err, out, want)
		}
		if st := status().Jobs; st.Count != n-1 {
			t.Errorf("after the removal the node has %d jobs, want %d", st.Count, n-1)
		}

		// Another apply made the set another: the command's changes are
		// not against it, and it sends the set by digest, which puts
		// job-050001 back as the directory has it.
		if out, err := applyCLI(t, nil, "-addr", addr, dir); err != nil {
			t.Fatalf("apply DIR: %v\n%s", err, out)
		}
		os.WriteFile(file, edited, 0o600)
		out, err = applyCLI(t, env, "-addr", addr, file)
		if err != nil || strings.Contains(out, "changes since") || !strings.Contains(out, fmt.Sprintf("applied %d jobs", n)) {
			t.Fatalf("apply of the file after another apply: %v: %q; want %d jobs applied by digest", err, out, n)
		}
		if err := proctest.GetJSON(dev.base+"/api/v1/jobs/job-050000", &got); err != nil || !slices.Equal(got.Command, []string{"/bin/false"}) {
			t.Errorf("after the apply by digest job-050000's command is %q (%v), want the file's", got.Command, err)
		}
	})

	t.Run("the Jobs page is one small page and finds any job", func(t *testing.T) {
		body, _, err := proctest.Get(dev.base + "/jobs")
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > 1<<20 {
			t.Errorf("the Jobs page is %d bytes, more than 1 MiB", len(body))
		}
		page := string(body)
		if got := strings.Count(page, `<tr class="job`); got != 100 {
			t.Errorf("the Jobs page shows %d jobs, want a page of 100", got)
		}
		if !strings.Contains(page, `data-job="job-000000"`) || !strings.Contains(page, `rel="next"`) || !strings.Contains(page, "100000 jobs") {
			t.Errorf("the first page lacks its first job, the next link or the count")
		}
		for _, tc := range []struct{ query, want string }{
			{"q=job-099999", `data-job="job-099999"`},
			{"q=zone%3Dz3&state=never", `data-job="job-000003"`},
		} {
			body, _, err := proctest.Get(dev.base + "/jobs?" + tc.query)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(body), tc.want) {
				t.Errorf("/jobs?%s lacks %s", tc.query, tc.want)
			}
		}
		body, _, _ = proctest.Get(dev.base + "/jobs?q=job-099999")
		if got := strings.Count(string(body), `<tr class="job`); got != 1 {
			t.Errorf("a search for one job's name shows %d jobs", got)
		}
		body, _, _ = proctest.Get(dev.base + "/")
		if !strings.Contains(string(body), ">100000<") {
			t.Errorf("the overview does not count 100000 jobs")
		}
	})

	t.Run("the API pages by cursor", func(t *testing.T) {
		var first wire.JobList
		if err := proctest.GetJSON(dev.base+"/api/v1/jobs", &first); err != nil {
			t.Fatal(err)
		}
		if len(first.Jobs) != 1000 || first.Next == "" || first.Total != n {
			t.Fatalf("first page: %d jobs, next %q, total %d", len(first.Jobs), first.Next, first.Total)
		}
		var second wire.JobList
		if err := proctest.GetJSON(dev.base+"/api/v1/jobs?limit=5&cursor="+url.QueryEscape(first.Next), &second); err != nil {
			t.Fatal(err)
		}
		if len(second.Jobs) != 5 || second.Jobs[0].Name != "job-001000" {
			t.Errorf("second page starts at %+v, want job-001000", second.Jobs)
		}
	})
}

// dirSize is the size of the files under dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	n, err := localcluster.DirSize(dir)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
