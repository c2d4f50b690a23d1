package web

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// maxJobStatSeries bounds how many jobs the per-job figures are exported
// for: only jobs with a finished run have any, at most one series per
// final state they reached; past this many jobs (in name order) the rest
// are left out and fencecron_job_stats_omitted says how many.
const maxJobStatSeries = 10_000

var (
	jobRunsDesc = prometheus.NewDesc("fencecron_job_runs_total",
		"Finished runs of a job by final state (skipped counts each skipped fire time), from the replicated state: every server reports the same; aggregate with max by (job_name, state). Only (job, state) pairs that occurred have a series.",
		[]string{"job_name", "state"}, nil)
	jobLastSuccessDesc = prometheus.NewDesc("fencecron_job_last_success_timestamp_seconds",
		"When the job's last successful run ended (Unix time, the worker's clock), from the replicated state; no series until one succeeded.",
		[]string{"job_name"}, nil)
	jobStatsOmittedDesc = prometheus.NewDesc("fencecron_job_stats_omitted",
		"Jobs with finished runs whose per-job series were left out, past the first 10000 in name order.", nil, nil)
)

// jobStats is the replicated state's per-job figures (fsm.FSM).
type jobStats interface {
	JobStatsPage(limit int) (map[string]replicated.JobStats, int)
}

// jobCollector exports the per-job figures at scrape time.
type jobCollector struct{ s *Server }

// Describe implements prometheus.Collector.
func (c jobCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobRunsDesc
	ch <- jobLastSuccessDesc
	ch <- jobStatsOmittedDesc
}

// Collect implements prometheus.Collector.
func (c jobCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.s.State.(jobStats)
	if !ok {
		return
	}
	if _, server := c.s.Cluster.RaftStats(); !server {
		return // a worker holds no replicated state: no series, not zeros
	}
	page, more := st.JobStatsPage(maxJobStatSeries)
	for job, s := range page {
		for state, n := range s.Runs {
			ch <- prometheus.MustNewConstMetric(jobRunsDesc, prometheus.CounterValue, float64(n), job, string(state))
		}
		if !s.LastSuccess.IsZero() {
			ch <- prometheus.MustNewConstMetric(jobLastSuccessDesc, prometheus.GaugeValue, float64(s.LastSuccess.UnixNano())/1e9, job)
		}
	}
	ch <- prometheus.MustNewConstMetric(jobStatsOmittedDesc, prometheus.GaugeValue, float64(more))
}
