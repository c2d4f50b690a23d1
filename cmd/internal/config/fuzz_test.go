package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/deploy/examples"
)

// FuzzParse feeds arbitrary bytes to the parser: it must return a file or
// an *Error, never panic, and never take long. The seed corpus (the
// example files and every table case) runs under plain `go test`.
func FuzzParse(f *testing.F) {
	f.Add(examples.Dev)
	if b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "examples", "fencecron.yaml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte(fullFile))
	for _, s := range []string{
		"", "---\n", "- a\n", "node: n1\n", "jobs: [report]\n", "a: &a [*a]\n",
		"node: &n {name: a}\ncluster: *n\n",
		"jobs:\n  - name: a\n   schedule: x\n",
		"cluster: {secret: '${'}\n", "cluster: {secret: '$${X}${FENCECRON_SECRET}'}\n",
		"jobs:\n  - {name: a, schedule: 'TZ=', shell: x}\n",
		"jobs:\n  - {name: a, schedule: '@every 1s', shell: x, output: '{{ range . }}{{ end }}'}\n",
		"store: {max_body_bytes: 99999999999999999999GiB}\n",
		"node: {ports: {http: 0x1F90}}\n",
		"\t\x00\xff",
		strings.Repeat("[", 5000),
		strings.Repeat("- ", 2000) + "x\n",
		"jobs:\n" + strings.Repeat("  - {name: a, schedule: '@daily', shell: x}\n", 50),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		file, err := parse("fuzz.yaml", data, lookup, hostname)
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("parse took %s", took)
		}
		var e *Error
		switch {
		case err == nil && file == nil:
			t.Fatal("nil file and nil error")
		case err != nil && !errors.As(err, &e):
			t.Fatalf("error %T is not *Error: %v", err, err)
		case err != nil && len(e.Problems) == 0:
			t.Fatal("*Error without problems")
		case err == nil:
			// A file that parsed has jobs that build schedules (or follow
			// others).
			for _, s := range file.Jobs {
				if len(s.Schedules) == 0 && len(s.After) > 0 {
					continue
				}
				if _, err := s.Schedule(); err != nil {
					t.Fatalf("job %s passed validation but: %v", s.Name, err)
				}
			}
			_ = file.JobsHash()
		}
	})
}
