package jobs

import (
	"strings"
	"testing"
)

func TestCheckAfter(t *testing.T) {
	spec := func(name string, after ...string) Spec { return Spec{Name: name, After: after} }
	for _, tc := range []struct {
		name  string
		specs []Spec
		want  []string
	}{
		{"chain", []Spec{spec("a"), spec("b", "a"), spec("c", "b")}, nil},
		{"unknown", []Spec{spec("a"), spec("b", "nope")}, []string{`b: "nope" is not a job of this set`}},
		{"cycle of two", []Spec{spec("a", "b"), spec("b", "a")}, []string{"cycle: a → b → a"}},
		{"cycle of three", []Spec{spec("x"), spec("a", "c"), spec("b", "a"), spec("c", "b")}, []string{"cycle: a → b → c → a"}},
		{"diamond", []Spec{spec("a"), spec("b", "a"), spec("c", "a"), spec("d", "b", "c")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, p := range CheckAfter(tc.specs) {
				got = append(got, p.Job+": "+p.Msg)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("problems = %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestSpec_ValidateNotifyAndAfter(t *testing.T) {
	base := func() Spec { return Spec{Name: "j", Schedules: []string{"@daily"}, Shell: "true"} }
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		l    Limits
		want string
	}{
		{"unknown state", func(s *Spec) { s.Notify = []Notify{{On: []string{"exploded"}, Webhook: "http://127.0.0.1/h"}} }, Limits{}, `notify[0]: on: "exploded" is not a state`},
		{"running is not notified", func(s *Spec) { s.Notify = []Notify{{On: []string{"running"}, Webhook: "http://127.0.0.1/h"}} }, Limits{}, `"running" is not a state`},
		{"no target", func(s *Spec) { s.Notify = []Notify{{On: []string{"failed"}}} }, Limits{}, "notify[0]: no target"},
		{"two targets", func(s *Spec) {
			s.Notify = []Notify{{On: []string{"failed"}, Webhook: "http://127.0.0.1/h", Slack: "https://127.0.0.1/s"}}
		}, Limits{}, "one target per entry"},
		{"bad url", func(s *Spec) { s.Notify = []Notify{{On: []string{"failed"}, Webhook: "ftp://x/h"}} }, Limits{}, "webhook:"},
		{"email without smtp", func(s *Spec) { s.Notify = []Notify{{On: []string{"failed"}, Email: []string{"a@example.test"}}} }, Limits{NoSMTP: true}, "no SMTP server"},
		{"bad address", func(s *Spec) { s.Notify = []Notify{{On: []string{"failed"}, Email: []string{"not an address"}}} }, Limits{}, "is not an address"},
		{"schedule and after", func(s *Spec) { s.After = []string{"x"} }, Limits{}, "has no schedule of its own"},
		{"after itself", func(s *Spec) { s.Schedules = nil; s.After = []string{"j"} }, Limits{}, "cannot follow itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.edit(&s)
			err := s.Validate(tc.l)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want it to say %q", err, tc.want)
			}
		})
	}
	s := base()
	s.Schedules, s.After = nil, []string{"x"}
	s.Notify = []Notify{{On: []string{"failed", "recovered"}, Email: []string{"Ops <ops@example.test>"}}}
	if err := s.Validate(Limits{}); err != nil {
		t.Errorf("a job after x, notifying by email: %v", err)
	}
}
