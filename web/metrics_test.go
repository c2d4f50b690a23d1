package web

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
)

var sampleLine = regexp.MustCompile(`^([a-z_:][a-z0-9_:]*)(\{([a-z_]+="(\\.|[^"\\])*",?)*\})? (\S+)$`)

// checkExposition checks the text format: HELP and TYPE before each
// family's samples, every sample of a known family, names fencecron_*,
// values numbers, histogram buckets cumulative and ending in +Inf = count.
func checkExposition(t *testing.T, text string) map[string]float64 {
	t.Helper()
	samples := map[string]float64{}
	types := map[string]string{}
	var bucket []float64
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			if _, dup := types[name]; dup {
				t.Errorf("line %d: family %s declared twice", i+1, name)
			}
			types[name] = typ
			bucket = nil
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("line %d: not a sample: %q", i+1, line)
			continue
		}
		name := m[1]
		if !strings.HasPrefix(name, "fencecron_") {
			t.Errorf("line %d: %s is not fencecron_*", i+1, name)
		}
		family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if types[family] == "" && types[name] == "" {
			t.Errorf("line %d: sample of undeclared family %s", i+1, name)
		}
		v, err := strconv.ParseFloat(m[len(m)-1], 64)
		if err != nil && m[len(m)-1] != "+Inf" {
			t.Errorf("line %d: bad value in %q", i+1, line)
		}
		if strings.HasSuffix(name, "_bucket") {
			if len(bucket) > 0 && v < bucket[len(bucket)-1] {
				t.Errorf("line %d: bucket not cumulative: %q", i+1, line)
			}
			bucket = append(bucket, v)
		}
		if strings.HasSuffix(name, "_count") && types[family] == "histogram" {
			if len(bucket) == 0 || bucket[len(bucket)-1] != v {
				t.Errorf("line %d: count %v differs from the +Inf bucket %v", i+1, v, bucket)
			}
			bucket = nil
		}
		samples[name+m[2]] = v
	}
	return samples
}

func TestServer_Metrics(t *testing.T) {
	f := newFixture(t)
	m := f.srv.Metrics
	// This node's worker: two attempts of report, one of them late and
	// lost after a SUSPECT, one fenced before it started.
	m.AttemptStarted("report", at(0), at(0).Add(30*time.Millisecond))
	m.LeaseRenewed(3*time.Millisecond, nil)
	m.LeaseRenewed(2*time.Second, errors.New("timeout"))
	m.LeaseTransition(jobs.EventSuspect)
	m.LeaseTransition(jobs.EventLost)
	m.AttemptFinished("report", scheduler.Completion{State: jobs.Lost, StartedAt: at(0), EndedAt: at(12)})
	m.AttemptFinished("report", scheduler.Completion{State: jobs.Fenced, EndedAt: at(13)})
	m.AttemptStarted("weird \"job\"\n", at(0), at(7))

	code, hdr, body := f.do(t, "GET", "/metrics", "")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics = %d %s", code, hdr.Get("Content-Type"))
	}
	s := checkExposition(t, body)
	for name, want := range map[string]float64{
		`fencecron_cluster_grants_total`:                                         3,
		`fencecron_cluster_stale_writes_refused_total`:                           1,
		`fencecron_cluster_lease_expiries_total`:                                 1,
		`fencecron_cluster_elections_total`:                                      2,
		`fencecron_cluster_runs{state="succeeded"}`:                              1,
		`fencecron_cluster_runs{state="failed"}`:                                 1,
		`fencecron_cluster_epoch`:                                                4,
		`fencecron_cluster_job_paused{job="heartbeat"}`:                          1,
		`fencecron_raft_state{state="Leader"}`:                                   1,
		`fencecron_raft_state{state="Follower"}`:                                 0,
		`fencecron_raft_applied_index`:                                           39,
		`fencecron_raft_last_contact_seconds`:                                    0,
		`fencecron_raft_voters`:                                                  2,
		`fencecron_gossip_members{state="suspect"}`:                              1,
		`fencecron_gossip_members{state="dead"}`:                                 1,
		`fencecron_lease_acquisitions_total{result="held"}`:                      2,
		`fencecron_lease_acquisitions_total{result="fenced"}`:                    1,
		`fencecron_lease_transitions_total{state="suspect"}`:                     1,
		`fencecron_lease_transitions_total{state="lost"}`:                        1,
		`fencecron_lease_renewal_failures_total`:                                 1,
		`fencecron_lease_renewal_seconds_count`:                                  2,
		`fencecron_lease_renewal_seconds_bucket{le="0.005"}`:                     1,
		`fencecron_lease_hold_seconds_bucket{le="10"}`:                           0,
		`fencecron_lease_hold_seconds_bucket{le="30"}`:                           1,
		`fencecron_work_cancelled_total{reason="lost"}`:                          1,
		`fencecron_work_cancelled_total{reason="cancelled"}`:                     0,
		`fencecron_attempts_finished_total{job="report",state="fenced"}`:         1,
		`fencecron_job_lateness_seconds_bucket{job="report",le="0.025"}`:         0,
		`fencecron_job_lateness_seconds_bucket{job="report",le="0.05"}`:          1,
		`fencecron_job_lateness_seconds_count{job="report"}`:                     1,
		`fencecron_job_lateness_seconds_sum{job="weird \"job\"\n"}`:              7,
		`fencecron_job_lateness_seconds_bucket{job="weird \"job\"\n",le="+Inf"}`: 1,
		`fencecron_http_event_streams`:                                           0,
	} {
		got, ok := s[name]
		if !ok {
			t.Errorf("missing %s", name)
		} else if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
