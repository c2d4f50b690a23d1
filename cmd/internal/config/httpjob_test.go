package config

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// What is wrong with an HTTP job is reported at the field, with what to
// write instead; nothing is applied (parse returns no config).
func TestParse_HTTPJobProblems(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "none.pem")
	tests := []struct {
		name, job string
		want      []string
	}{
		{"with command", `{name: a, schedule: '@daily', shell: x, http: {url: "http://127.0.0.1:1/"}}`,
			[]string{"test.yaml:2:51: jobs[0].http: give http, or command or shell, not both"}},
		{"bad scheme", `{name: a, schedule: '@daily', http: {url: "ftp://127.0.0.1/x"}}`,
			[]string{`test.yaml:2:47: jobs[0].http.url: "ftp://127.0.0.1/x": the scheme must be http or https, not "ftp"`}},
		{"no url", `{name: a, schedule: '@daily', http: {method: POST}}`,
			[]string{"test.yaml:2:41: jobs[0].http.url: required"}},
		{"bad method", `{name: a, schedule: '@daily', http: {url: "http://127.0.0.1/", method: get}}`,
			[]string{`test.yaml:2:76: jobs[0].http.method: "get": want one of GET`}},
		{"status out of range", `{name: a, schedule: '@daily', http: {url: "http://127.0.0.1/", expect_status: [200, 99, 600]}}`,
			[]string{"test.yaml:2:89: jobs[0].http.expect_status[1]: 99: an HTTP status is 100 to 599",
				"test.yaml:2:93: jobs[0].http.expect_status[2]: 600: an HTTP status is 100 to 599"}},
		{"status not a number", `{name: a, schedule: '@daily', http: {url: "http://127.0.0.1/", expect_status: [ok]}}`,
			[]string{`test.yaml:2:84: jobs[0].http.expect_status[0]: expected an integer, got "ok"`}},
		{"fence header", `{name: a, schedule: '@daily', http: {url: "http://127.0.0.1/", headers: {Fencecron-Token: x}}}`,
			[]string{`test.yaml:2:78: jobs[0].http.headers: "Fencecron-Token": names starting with Fencecron-`}},
		{"unreadable ca_file", fmt.Sprintf(`{name: a, schedule: '@daily', http: {url: "https://127.0.0.1/", ca_file: %q}}`, missing),
			[]string{"test.yaml:2:78: jobs[0].http.ca_file: cannot read the CA file"}},
		{"ca_file not PEM", fmt.Sprintf(`{name: a, schedule: '@daily', http: {url: "https://127.0.0.1/", ca_file: %q}}`, notPEM),
			[]string{"test.yaml:2:78: jobs[0].http.ca_file: " + notPEM + " holds no PEM certificate"}},
		{"body template", `{name: a, schedule: '@daily', http: {url: "http://127.0.0.1/", method: POST, body: '{{ .Nope }}'}}`,
			[]string{"test.yaml:2:88: jobs[0].http.body: body template:"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := problems(t, "jobs:\n  - "+tc.job+"\n")
			if len(got) != len(tc.want) {
				t.Fatalf("problems = %q\nwant %q", got, tc.want)
			}
			for i := range got {
				if len(got[i]) < len(tc.want[i]) || got[i][:len(tc.want[i])] != tc.want[i] {
					t.Errorf("problem %d = %q\nwant it to start with %q", i, got[i], tc.want[i])
				}
			}
		})
	}
	// A good one parses.
	if got := problems(t, "jobs:\n  - {name: a, schedule: '@daily', http: {url: \"https://127.0.0.1:8443/hook\", method: POST, body: 'run {{ .RunID }}', expect_status: [200, 204]}}\n"); got != nil {
		t.Errorf("problems = %q, want none", got)
	}
}
