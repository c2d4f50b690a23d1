package web

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/scheduler/notify"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// fakeSender is a notification sender with the targets it is given; ok
// false: this node does not lead.
type fakeSender struct {
	targets []notify.Target
	ok      bool
}

func (f fakeSender) NotifyTargets() ([]notify.Target, bool) { return f.targets, f.ok }

// noticedState is the fixture's state with two notices pending.
type noticedState struct{ *fakeState }

func (noticedState) Notices() []replicated.Notice { return make([]replicated.Notice, 2) }

func TestServer_NotifyTargets(t *testing.T) {
	hung := notify.Target{Target: "https://hooks.example.com", Kind: "webhook", Jobs: []string{"report"}, Pending: 7, InFlight: 0,
		BackingOff: true, Failures: 3, RetryAt: at(60), LastError: "Post https://hooks.example.com: context deadline exceeded", LastFailure: at(45)}
	slackA := notify.Target{Target: "https://hooks.slack.com", Kind: "slack", Pending: 1, InFlight: 1}
	slackB := notify.Target{Target: "https://hooks.slack.com", Kind: "slack", Pending: 2, InFlight: 1, LastDelivery: at(40)}
	sender := fakeSender{targets: []notify.Target{hung, slackA, slackB}, ok: true}

	t.Run("leader", func(t *testing.T) {
		f := newFixture(t, func(s *Server) { s.Notifications = sender })
		code, _, body := f.do(t, http.MethodGet, "/api/v1/status", "")
		var st wire.Status
		if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
			t.Fatalf("%d %s (%v)", code, body, err)
		}
		if st.Notify == nil || len(st.Notify.Targets) != 3 || !st.Notify.Targets[0].BackingOff || st.Notify.Targets[0].Target != hung.Target {
			t.Errorf("status notify = %+v", st.Notify)
		}

		code, _, page := f.get(t, "/")
		if code != http.StatusOK {
			t.Fatalf("%d", code)
		}
		for _, want := range []string{"Notification targets", `data-target="https://hooks.example.com" data-backing-off="true"`,
			"backing off</span> 3 tries in a row unanswered · next try 2026-08-01 09:01:00Z", "context deadline exceeded", `data-target="https://hooks.slack.com" data-backing-off="false"`} {
			if !strings.Contains(page, want) {
				t.Errorf("the overview lacks %q", want)
			}
		}

		_, _, metrics := f.do(t, http.MethodGet, "/metrics", "")
		for _, want := range []string{`fencecron_notify_target_backing_off{target="https://hooks.example.com"} 1`,
			`fencecron_notify_target_failures{target="https://hooks.example.com"} 3`, `fencecron_notify_target_pending{target="https://hooks.example.com"} 7`,
			// Two Slack webhooks are one series.
			`fencecron_notify_target_backing_off{target="https://hooks.slack.com"} 0`, `fencecron_notify_target_pending{target="https://hooks.slack.com"} 3`} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})

	t.Run("follower", func(t *testing.T) {
		f := newFixture(t, func(s *Server) {
			s.Notifications = fakeSender{}
			s.State = noticedState{s.State.(*fakeState)}
		})
		_, _, body := f.do(t, http.MethodGet, "/api/v1/status", "")
		if strings.Contains(body, `"notify"`) {
			t.Errorf("a node that does not lead shows notification targets: %s", body)
		}
		_, _, page := f.get(t, "/")
		if strings.Contains(page, "Notification targets") || !strings.Contains(page, `2 notifications pending: the leader sends them and shows their targets on <a href="http://127.0.0.1:8082/#notify-targets">`) {
			t.Errorf("the overview of a node that does not lead: %s", page)
		}
		_, _, metrics := f.do(t, http.MethodGet, "/metrics", "")
		if strings.Contains(metrics, "fencecron_notify_target_") {
			t.Error("a node that does not lead exports notification targets")
		}
	})
}
