package config

import (
	"strings"
	"testing"
)

const notifyNode = "node: {name: n1, bootstrap_expect: 1}\ncluster: {secret: correct-horse-battery-staple-0123456789}\n"

func TestParse_Notify(t *testing.T) {
	emailJob := "jobs:\n  - {name: j, schedule: '@daily', shell: x, notify: [{on: [failed], email: [ops@example.test]}]}\n"
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{"email without smtp", notifyNode + emailJob, []string{"test.yaml:4:54: jobs[0].notify[0]: email: no SMTP server"}},
		{"no host", notifyNode + "notify: {from: a@example.test}\n", []string{"notify.host: required"}},
		{"no from", notifyNode + "notify: {host: 127.0.0.1}\n", []string{"notify.from: required"}},
		{"credentials in clear", notifyNode + "notify: {host: smtp.example.test, from: a@example.test, username: u, password: p}\n",
			[]string{"notify.starttls: credentials would cross the network in clear"}},
		{"bad dashboard", notifyNode + "notify: {host: 127.0.0.1, from: a@example.test, dashboard_url: ftp://x}\n", []string{"notify.dashboard_url:"}},
		{"unknown state", notifyNode + "jobs:\n  - {name: j, schedule: '@daily', shell: x, notify: [{on: [exploded], webhook: 'http://127.0.0.1/h'}]}\n",
			[]string{`jobs[0].notify[0]: on: "exploded" is not a state that is notified`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(problems(t, tc.src), "\n")
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("problems:\n%s\nwant one with %q", got, w)
				}
			}
		})
	}
	f := MustParse(t, notifyNode+"notify: {host: 127.0.0.1, from: fencecron@example.test, password: '${PGPASSWORD}', username: u}\n"+emailJob)
	if f.Notify.Host != "127.0.0.1" || f.Notify.SMTPPort() != 25 || f.Notify.Password != "s3cret" || len(f.Jobs[0].Notify) != 1 {
		t.Errorf("notify = %+v, job notify %+v", f.Notify, f.Jobs[0].Notify)
	}
	// A file of jobs alone is checked against its node's SMTP server.
	if got := problems(t, emailJob); len(got) != 0 {
		t.Errorf("a jobs-only file with email: %q", got)
	}
}
