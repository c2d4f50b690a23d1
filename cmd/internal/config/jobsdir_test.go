package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func problemLines(t *testing.T, err error) []string {
	t.Helper()
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("err = %v, want *Error", err)
	}
	var out []string
	for _, p := range cerr.Problems {
		out = append(out, p.String())
	}
	return out
}

func TestLoadJobFiles(t *testing.T) {
	t.Run("joins the files in name order", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{
			"b.yaml":     "jobs:\n  - name: two\n    schedule: '@daily'\n    shell: 'true'\n",
			"a.yml":      "jobs:\n  - name: one\n    schedule: '@hourly'\n    shell: 'true'\n",
			".a.yaml.sw": "not: yaml: at all",
			"notes.txt":  "ignored",
		})
		paths, err := JobFilesIn(dir)
		if err != nil {
			t.Fatal(err)
		}
		set, err := LoadJobFiles(paths)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range set.Jobs {
			names = append(names, s.Name)
		}
		if !slices.Equal(names, []string{"one", "two"}) || len(set.Files) != 2 {
			t.Errorf("jobs %v from %v, want one, two from a.yml, b.yaml", names, set.Files)
		}
	})
	t.Run("a name in two files is reported at both", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{
			"a.yaml": "jobs:\n  - name: report\n    schedule: '@daily'\n    shell: 'true'\n",
			"b.yaml": "jobs:\n  - name: other\n    schedule: '@daily'\n    shell: 'true'\n  - name: report\n    schedule: '@daily'\n    shell: 'true'\n",
		})
		paths, _ := JobFilesIn(dir)
		_, err := LoadJobFiles(paths)
		got := problemLines(t, err)
		a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
		want := []string{
			a + `:2:11: jobs[0].name: "report" is the name of the job at ` + b + `:5:11 too`,
			b + `:5:11: jobs[1].name: "report" is already the name of the job at ` + a + `:2:11`,
		}
		if !slices.Equal(got, want) {
			t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("every file's problems at their own positions", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{
			"a.yaml": "jobs:\n  - name: ok\n    schedule: '@daily'\n    shell: 'true'\n",
			"b.yaml": "jobs:\n  - name: bad\n    schedule: 'every tuesday'\n    shell: 'true'\n",
			"c.yaml": "store:\n  backend: bolt\njobs: []\n",
		})
		paths, _ := JobFilesIn(dir)
		_, err := LoadJobFiles(paths)
		got := strings.Join(problemLines(t, err), "\n")
		for _, w := range []string{filepath.Join(dir, "b.yaml") + ":3:15: jobs[0].schedule: \"every tuesday\"", filepath.Join(dir, "c.yaml") + ": store: a file of jobs holds a jobs section only"} {
			if !strings.Contains(got, w) {
				t.Errorf("problems lack %q:\n%s", w, got)
			}
		}
		if strings.Contains(got, "a.yaml") {
			t.Errorf("a valid file is reported:\n%s", got)
		}
	})
	t.Run("a directory without job files", func(t *testing.T) {
		if _, err := JobFilesIn(t.TempDir()); err == nil || !strings.Contains(err.Error(), "would remove every job") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestFile_NodeJobs(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "jobs.d"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{
		"node.yaml":         "node:\n  name: n1\n  bootstrap_expect: 1\n  jobs_dir: jobs.d\ncluster:\n  secret: 8f3a91c2d7e04b6a5c1f9e2d3b7a6c40\njobs:\n  - name: own\n    schedule: '@daily'\n    shell: 'true'\n",
		"jobs.d/team.yaml":  "jobs:\n  - name: team\n    schedule: '@daily'\n    shell: 'true'\n",
		"jobs.d/clash.yaml": "jobs: []\n",
	})
	f, err := Load(filepath.Join(dir, "node.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.NodeJobs()
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Jobs) != 2 || set.Jobs[0].Name != "own" || set.Jobs[1].Name != "team" {
		t.Errorf("jobs = %+v, want own, then team", set.Jobs)
	}
	writeFiles(t, dir, map[string]string{"jobs.d/clash.yaml": "jobs:\n  - name: own\n    schedule: '@daily'\n    shell: 'true'\n"})
	_, err = f.NodeJobs()
	got := strings.Join(problemLines(t, err), "\n")
	if !strings.Contains(got, filepath.Join(dir, "node.yaml")+":8:11") || !strings.Contains(got, filepath.Join(dir, "jobs.d", "clash.yaml")+":2:11") {
		t.Errorf("a name in the config and its jobs_dir is not reported at both:\n%s", got)
	}
}
