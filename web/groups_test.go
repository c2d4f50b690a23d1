package web

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/web/api"
)

// groupedState is the fixture's state with one group: one run holding its
// place, two waiting.
type groupedState struct{ *fakeState }

func (groupedState) Groups() []fsm.GroupStatus {
	return []fsm.GroupStatus{{
		Group:   jobs.Group{Name: "db", MaxRunning: 1, MaxWaiting: 100},
		Defined: true,
		Holding: []jobs.Run{{ID: "a@20260801T090000Z", Job: "a", ScheduledAt: at(0), State: jobs.Running, Group: "db",
			Attempts: []jobs.Attempt{{ID: "a@20260801T090000Z.1", Number: 1, Worker: "w2", State: jobs.Running, Token: jobs.Fence{Epoch: 4, Seq: 20}}}}},
		Waiting: []replicated.GroupWaiter{
			{Run: "b@20260801T090000Z", ScheduledAt: at(0), Since: at(30)},
			{Run: "c@20260801T090001Z", ScheduledAt: at(1), Since: at(40)},
		},
	}}
}

func TestServer_Groups(t *testing.T) {
	f := newFixture(t, func(s *Server) { s.State = groupedState{s.State.(*fakeState)} })
	t.Run("api", func(t *testing.T) {
		code, _, body := f.do(t, http.MethodGet, "/api/v1/groups", "")
		var got struct{ Groups []api.GroupView }
		if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil {
			t.Fatalf("%d %s (%v)", code, body, err)
		}
		g := got.Groups[0]
		// The fixture's clock says at(50).
		if len(g.Running) != 1 || len(g.Waiting) != 2 || g.OldestWaitSeconds != 20 || g.Waiting[0].Reason != "waiting for group db" {
			t.Errorf("group = %+v", g)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		_, _, body := f.do(t, http.MethodGet, "/metrics", "")
		for _, want := range []string{"fencecron_cluster_attempts_released_total 0", "fencecron_cluster_group_full_total 0", `fencecron_group_running{group="db"} 1`, `fencecron_group_waiting{group="db"} 2`, `fencecron_group_oldest_waiter_age_seconds{group="db"} 20`} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
	t.Run("overview", func(t *testing.T) {
		code, _, body := f.get(t, "/")
		if code != http.StatusOK {
			t.Fatalf("%d", code)
		}
		for _, want := range []string{"Concurrency groups", `data-group="db"`, "1 of 1", "2 of 100", "1. b@20260801T090000Z", "waiting for group db for 20.0s", "#1 on w2"} {
			if !strings.Contains(body, want) {
				t.Errorf("the overview lacks %q", want)
			}
		}
	})
}

// twoTeamGroups is the fixture's state with a group of the default
// namespace and one of team-b.
type twoTeamGroups struct{ *fakeState }

func (twoTeamGroups) Groups() []fsm.GroupStatus {
	return []fsm.GroupStatus{
		{Group: jobs.Group{Name: "db", MaxRunning: 1}, Defined: true},
		{Group: jobs.Group{Name: "team-b:ci", MaxRunning: 2}, Defined: true},
	}
}

// With ACLs on, an operator who may read only the default namespace
// scrapes /metrics without team-b's series; one who reads every
// namespace gets them all.
func TestACL_MetricsSeriesFiltered(t *testing.T) {
	f := newFixture(t, func(s *Server) { s.ACL = true; s.State = twoTeamGroups{s.State.(*fakeState)} })
	scoped := aclToken(t, f, acl.Policy{Name: "ops-default", Operator: true, Rules: []acl.Rule{{Namespace: "default", Capabilities: []acl.Capability{acl.CapRead}}}})
	all := aclToken(t, f, acl.Policy{Name: "ops-all", Operator: true, Rules: []acl.Rule{{Namespace: "*", Capabilities: []acl.Capability{acl.CapRead}}}})
	scrape := func(secret string) string {
		t.Helper()
		code, _, body := f.do(t, http.MethodGet, "/metrics", "", "Authorization", "Bearer "+secret)
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d %.300s", code, body)
		}
		return body
	}
	body := scrape(scoped)
	if !strings.Contains(body, `fencecron_group_running{group="db"} 0`) || !strings.Contains(body, "fencecron_cluster_group_full_total 0") {
		t.Errorf("the default namespace's operator lacks its own series:\n%.2000s", body)
	}
	if strings.Contains(body, "team-b") {
		t.Errorf("the default namespace's operator sees team-b's series")
	}
	if body := scrape(all); !strings.Contains(body, `fencecron_group_running{group="team-b:ci"} 0`) {
		t.Errorf("an operator of every namespace lacks team-b's series")
	}
}
