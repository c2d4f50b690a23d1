package worker

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

// Every variable the worker gives a job is in the table of the job's
// environment in docs/configuration.md.
func TestWorker_EnvDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## The job's environment\n")
	if !ok {
		t.Fatal("docs/configuration.md has no section on the job's environment")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	w := &Worker{ID: "w1", StoreAddr: "https://127.0.0.1:1", StoreCA: "/ca.pem", TokenText: func(Assignment) string { return "t" }}
	env := w.env(Assignment{Run: jobs.Run{ID: "j@x", Job: "j"}, Attempt: jobs.Attempt{ID: "j@x.1"}}, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if len(env) < 10 {
		t.Fatalf("env = %v", env)
	}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !regexp.MustCompile("`" + regexp.QuoteMeta(name) + "`").MatchString(section) {
			t.Errorf("%s is not documented in the job environment of docs/configuration.md", name)
		}
	}
}
