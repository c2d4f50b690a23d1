package web

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/web/api"
)

// scrape gets /metrics and parses it with Prometheus' own parser into
// samples keyed as the text format writes them, name{label="value",...}
// with labels sorted by name (histograms as _bucket, _sum and _count).
func scrape(t *testing.T, f *fixture) (map[string]float64, map[string]*dto.MetricFamily) {
	t.Helper()
	code, hdr, body := f.do(t, "GET", "/metrics", "")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics = %d %s", code, hdr.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	samples := map[string]float64{}
	key := func(name string, labels []*dto.LabelPair, extra ...string) string {
		var kv []string
		for _, l := range labels {
			kv = append(kv, l.GetName()+`="`+labelEscaper.Replace(l.GetValue())+`"`)
		}
		kv = append(kv, extra...)
		slices.Sort(kv)
		if len(kv) == 0 {
			return name
		}
		return name + "{" + strings.Join(kv, ",") + "}"
	}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				samples[key(name, m.GetLabel())] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				samples[key(name, m.GetLabel())] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					samples[key(name+"_bucket", m.GetLabel(), `le="`+strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)+`"`)] = float64(b.GetCumulativeCount())
				}
				samples[key(name+"_bucket", m.GetLabel(), `le="+Inf"`)] = float64(h.GetSampleCount())
				samples[key(name+"_sum", m.GetLabel())] = h.GetSampleSum()
				samples[key(name+"_count", m.GetLabel())] = float64(h.GetSampleCount())
			default:
				samples[key(name, m.GetLabel())] = m.GetUntyped().GetValue()
			}
		}
	}
	return samples, families
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

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
	m.AttemptFinished("report", replicated.Completion{State: jobs.Lost, StartedAt: at(0), EndedAt: at(12)})
	m.AttemptFinished("report", replicated.Completion{State: jobs.Fenced, EndedAt: at(13)})
	m.AttemptStarted("weird \"job\"\n", at(0), at(7))
	// This node's store: two applied publishes and a stale one.
	m.StoreDecided(fencedstore.Applied)
	m.StoreDecided(fencedstore.Applied)
	m.StoreDecided(fencedstore.StaleOwner)

	s, families := scrape(t, f)
	for name, want := range map[string]float64{
		`fencecron_cluster_grants_total`:                                              3,
		`fencecron_cluster_stale_writes_refused_total`:                                1,
		`fencecron_cluster_lease_expiries_total`:                                      1,
		`fencecron_cluster_elections_total`:                                           2,
		`fencecron_cluster_runs{state="succeeded"}`:                                   1,
		`fencecron_cluster_runs{state="failed"}`:                                      1,
		`fencecron_cluster_epoch`:                                                     4,
		`fencecron_cluster_job_paused{job_name="heartbeat"}`:                          1,
		`fencecron_raft_state{state="Leader"}`:                                        1,
		`fencecron_raft_state{state="Follower"}`:                                      0,
		`fencecron_raft_term`:                                                         4,
		`fencecron_raft_last_log_index`:                                               40,
		`fencecron_raft_applied_index`:                                                39,
		`fencecron_raft_fsm_pending`:                                                  1,
		`fencecron_raft_last_contact_seconds`:                                         0,
		`fencecron_raft_voters`:                                                       2,
		`fencecron_gossip_members{state="suspect"}`:                                   1,
		`fencecron_gossip_members{state="dead"}`:                                      1,
		`fencecron_lease_acquisitions_total{result="held"}`:                           2,
		`fencecron_lease_acquisitions_total{result="fenced"}`:                         1,
		`fencecron_lease_transitions_total{state="suspect"}`:                          1,
		`fencecron_lease_transitions_total{state="lost"}`:                             1,
		`fencecron_lease_renewal_failures_total`:                                      1,
		`fencecron_lease_renewal_seconds_count`:                                       2,
		`fencecron_lease_renewal_seconds_bucket{le="0.005"}`:                          1,
		`fencecron_lease_hold_seconds_bucket{le="10"}`:                                0,
		`fencecron_lease_hold_seconds_bucket{le="30"}`:                                1,
		`fencecron_work_cancelled_total{reason="lost"}`:                               1,
		`fencecron_work_cancelled_total{reason="cancelled"}`:                          0,
		`fencecron_attempts_finished_total{job_name="report",state="fenced"}`:         1,
		`fencecron_job_lateness_seconds_bucket{job_name="report",le="0.025"}`:         0,
		`fencecron_job_lateness_seconds_bucket{job_name="report",le="0.05"}`:          1,
		`fencecron_job_lateness_seconds_count{job_name="report"}`:                     1,
		`fencecron_job_lateness_seconds_sum{job_name="weird \"job\"\n"}`:              7,
		`fencecron_job_lateness_seconds_bucket{job_name="weird \"job\"\n",le="+Inf"}`: 1,
		`fencecron_store_decisions_total{outcome="applied"}`:                          2,
		`fencecron_store_decisions_total{outcome="stale_owner"}`:                      1,
		`fencecron_store_decisions_total{outcome="expired"}`:                          0,
		`fencecron_store_refusal_notes_dropped_total`:                                 0,
		`fencecron_http_event_streams`:                                                0,
		`fencecron_login_failures_total{reason="wrong_token"}`:                        0,
	} {
		got, ok := s[name]
		if !ok {
			t.Errorf("missing %s", name)
		} else if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// The Go runtime and the process are there too.
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_open_fds"} {
		if _, ok := families[name]; !ok {
			t.Errorf("missing %s", name)
		}
	}
	// Prometheus keeps the labels job and instance for the scrape target.
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "job" || l.GetName() == "instance" {
					t.Errorf("%s has a label %s", name, l.GetName())
				}
			}
		}
	}
}

// A worker node runs no Raft: no Raft figures, and nothing else missing.
func TestServer_MetricsOfAWorker(t *testing.T) {
	f := newFixture(t, func(s *Server) { s.Cluster = workerCluster{s.Cluster} })
	s, _ := scrape(t, f)
	for _, name := range []string{"fencecron_raft_term", "fencecron_raft_last_log_index", "fencecron_raft_last_contact_seconds"} {
		if _, ok := s[name]; ok {
			t.Errorf("a worker reports %s", name)
		}
	}
	if _, ok := s["fencecron_cluster_grants_total"]; !ok {
		t.Error("a worker does not report the replicated counters")
	}
}

// workerCluster is a Cluster without Raft.
type workerCluster struct{ api.Cluster }

func (workerCluster) RaftStats() (election.RaftStats, bool) { return election.RaftStats{}, false }
