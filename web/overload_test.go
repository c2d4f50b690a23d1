package web

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// While the log says the leader sheds fire times for want of room, the
// status, the Overview and /metrics say the cluster is overloaded and
// since when; once jobs.OverloadQuiet has passed since the last, none of
// them does.
func TestServer_Overload(t *testing.T) {
	clock := &stepClock{now: at(50)}
	f := newFixture(t, func(s *Server) {
		s.Clock = clock
		st := s.State.(*fakeState)
		st.overload = jobs.Overload{Since: at(10), Last: at(49), Skipped: 1234}
	})
	_, _, status := f.do(t, http.MethodGet, "/api/v1/status", "")
	if !strings.Contains(status, `"overload": {`) || !strings.Contains(status, `"skipped": 1234`) {
		t.Errorf("status does not say overloaded:\n%s", status)
	}
	_, _, page := f.do(t, http.MethodGet, "/", "")
	if !strings.Contains(page, `id="overload"`) || !strings.Contains(page, "1234 fire times skipped") {
		t.Errorf("the Overview does not say overloaded")
	}
	_, _, metrics := f.do(t, http.MethodGet, "/metrics", "")
	for _, want := range []string{"fencecron_cluster_overloaded 1", "fencecron_cluster_overload_skipped_total 1234", "fencecron_cluster_overloaded_since_timestamp_seconds 1.7"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	clock.Advance(jobs.OverloadQuiet)
	_, _, status = f.do(t, http.MethodGet, "/api/v1/status", "")
	_, _, page = f.do(t, http.MethodGet, "/", "")
	_, _, metrics = f.do(t, http.MethodGet, "/metrics", "")
	if strings.Contains(status, `"overload"`) || strings.Contains(page, `id="overload"`) || !strings.Contains(metrics, "fencecron_cluster_overloaded 0") {
		t.Errorf("%v after the last shed fire time, still overloaded", jobs.OverloadQuiet+time.Second)
	}
}
