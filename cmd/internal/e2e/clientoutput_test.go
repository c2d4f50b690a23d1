package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// What the client commands print and how they fail, against a real dev
// node: errors for unknown jobs, runs columns and -limit, paused jobs,
// times in a job's zone, an empty file (the papercuts of issue 17).
func TestClient_OutputAgainstDev(t *testing.T) {
	t.Parallel()
	d, addr := startDevJobs(t, `  - name: tick
    schedule: "@every 1s"
    shell: 'true'
  - name: berlin
    schedule: "0 9 * * *"
    timezone: Europe/Berlin
    shell: 'true'
  - name: quiet
    schedule: "@every 1s"
    shell: 'true'
    paused: true
`)
	bin := proctest.Binary(t)
	exitOf := func(args ...string) (int, string) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}

	t.Run("runs of an unknown job", func(t *testing.T) {
		code, out := exitOf("runs", "nosuchjob", "-addr", addr)
		if code != 1 || !strings.Contains(out, "unknown job") {
			t.Errorf("runs nosuchjob: exit %d, %s; want exit 1 and unknown job, as trigger says", code, out)
		}
		if code, out := exitOf("trigger", "nosuchjob", "-addr", addr); code != 1 || !strings.Contains(out, "unknown job") {
			t.Errorf("trigger nosuchjob: exit %d, %s", code, out)
		}
	})

	t.Run("runs -limit, scheduled time, duration, exit code", func(t *testing.T) {
		var out string
		proctest.Eventually(t, 30*time.Second, "two finished tick runs", func() error {
			var err error
			if out, err = cli(t, "runs", "tick", "-state", "succeeded", "-limit", "2", "-addr", addr); err != nil {
				return err
			}
			if n := strings.Count(out, "\ntick@"); n != 2 {
				return fmt.Errorf("%d runs listed", n)
			}
			return nil
		})
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if h := strings.Fields(lines[0]); strings.Join(h, " ") != "RUN SCHEDULED STATE ATTEMPT TOKEN WORKER DURATION EXIT STORE NOTE" {
			t.Errorf("header %v", h)
		}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) < 8 {
				t.Fatalf("line %q", l)
			}
			at, err := time.Parse(time.RFC3339, f[1])
			if err != nil || !strings.Contains(f[0], at.UTC().Format("20060102T150405Z")) {
				t.Errorf("scheduled %q does not match run %s", f[1], f[0])
			}
			if d, err := time.ParseDuration(f[6]); err != nil || d <= 0 {
				t.Errorf("duration %q of %s", f[6], f[0])
			}
			if f[7] != "0" {
				t.Errorf("exit %q of %s, want 0", f[7], f[0])
			}
		}
	})

	t.Run("paused jobs have no next fire time", func(t *testing.T) {
		var j wire.Job
		if err := proctest.GetJSON(d.base+"/api/v1/jobs/quiet", &j); err != nil {
			t.Fatal(err)
		}
		if !j.Paused || !j.NextFire.IsZero() {
			t.Errorf("API: quiet paused %v, next fire %s; want paused and none", j.Paused, j.NextFire)
		}
		if out, err := cli(t, "pause", "tick", "-addr", addr); err != nil {
			t.Fatal(err, out)
		}
		if err := proctest.GetJSON(d.base+"/api/v1/jobs/tick", &j); err != nil || !j.NextFire.IsZero() {
			t.Errorf("API after pause: tick next fire %s (%v); want none", j.NextFire, err)
		}
		out, err := cli(t, "jobs", "-addr", addr)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(out, "\n") {
			if (strings.HasPrefix(l, "quiet ") || strings.HasPrefix(l, "tick ")) && !strings.Contains(l, "- (paused)") {
				t.Errorf("jobs: %q shows a next fire time", l)
			}
		}
		for _, page := range []string{"/jobs/quiet", "/jobs?q=quiet"} {
			body, _, err := proctest.Get(d.base + page)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(body), "none while paused") {
				t.Errorf("dashboard %s does not say paused jobs fire at none", page)
			}
		}
		body, _, _ := proctest.Get(d.base + "/jobs/quiet")
		_, fires, _ := strings.Cut(string(body), "<dt>next fire times</dt>")
		if fires, _, _ = strings.Cut(fires, "</dd>"); strings.Contains(fires, "<div>") {
			t.Errorf("the job page lists fire times of a paused job: %s", fires)
		}
	})

	t.Run("jobs shows NEXT in the job's zone", func(t *testing.T) {
		out, err := cli(t, "jobs", "-addr", addr)
		if err != nil {
			t.Fatal(err)
		}
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "berlin ") {
				line = l
			}
		}
		berlin, _ := time.LoadLocation("Europe/Berlin")
		var next time.Time
		for _, f := range strings.Fields(line) {
			if t, err := time.Parse(time.RFC3339, f); err == nil {
				next = t
			}
		}
		_, off := next.In(berlin).Zone()
		if _, got := next.Zone(); next.IsZero() || got != off || next.In(berlin).Hour() != 9 {
			t.Errorf("berlin's NEXT in %q: want 09:00 with Berlin's offset", line)
		}
	})

	t.Run("an empty file: validate and apply agree", func(t *testing.T) {
		empty := filepath.Join(t.TempDir(), "empty.yaml")
		if err := os.WriteFile(empty, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		var before, after wire.JobSet
		if err := proctest.GetJSON(d.base+"/api/v1/jobset", &before); err != nil {
			t.Fatal(err)
		}
		vcode, vout := exitOf("validate", empty)
		acode, aout := exitOf("apply", "-addr", addr, empty)
		const want = "is empty (no node, cluster, store, api or jobs section): write `jobs: []` to mean a set of no jobs"
		if vcode != 1 || acode != 1 || !strings.Contains(vout, want) || !strings.Contains(aout, want) {
			t.Errorf("validate: exit %d %s\napply: exit %d %s\nwant both exit 1 saying %q", vcode, vout, acode, aout, want)
		}
		if err := proctest.GetJSON(d.base+"/api/v1/jobset", &after); err != nil || after.Info.Hash != before.Info.Hash {
			t.Errorf("the job set changed: %s → %s (%v)", before.Info.Hash, after.Info.Hash, err)
		}
	})
}
