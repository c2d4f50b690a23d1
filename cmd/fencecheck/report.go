package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/fencemodel"
	"github.com/fencecron/fencecron/jobs"
)

// Report is what a run found: the JSON file and the summary table.
type Report struct {
	// OK is true when no check found a violation.
	OK       bool          `json:"ok"`
	Seed     uint64        `json:"seed"`
	Duration time.Duration `json:"duration_ns"`
	Net      string        `json:"net"`
	Nodes    []string      `json:"nodes"`
	Lease    time.Duration `json:"lease_ttl_ns"`
	Started  time.Time     `json:"started"`
	Ended    time.Time     `json:"ended"`
	Window   Window        `json:"window"`
	Dir      string        `json:"dir"`
	// DrainError says what was still unfinished when the drain gave up.
	DrainError string        `json:"drain_error,omitempty"`
	Counts     Counts        `json:"counts"`
	Checks     []CheckResult `json:"checks"`
	Faults     []Op          `json:"faults"`
}

// Counts are what happened during the run.
type Counts struct {
	Runs         int `json:"runs"`
	SkippedRuns  int `json:"skipped_runs"`
	SkippedTimes int `json:"skipped_times"`
	Attempts     int `json:"attempts"`
	Takeovers    int `json:"takeovers"`
	// NeverStarted counts the takeovers of attempts that never started,
	// which no retry paid for (scheduler/fsm/startconfirm.go).
	NeverStarted int `json:"never_started"`
	// GrantedAhead counts attempts granted before their run's scheduled
	// time (scheduler/fsm/pregrant.go).
	GrantedAhead          int                `json:"granted_ahead"`
	Retries               int                `json:"retries"`
	AttemptStates         map[jobs.State]int `json:"attempt_states"`
	FencedAttempts        int                `json:"fenced_attempts"`
	FencedAtEstablish     int                `json:"fenced_at_establish"`
	Keys                  int                `json:"keys"`
	Decisions             int                `json:"decisions"`
	Applied               int                `json:"applied"`
	Established           int                `json:"established"`
	StalePublishRefused   int                `json:"stale_publishes_refused"`
	StaleEstablishRefused int                `json:"stale_establishes_refused"`
	ExpiredRefused        int                `json:"expired_refused"`
	Calls                 int                `json:"calls"`
	UnknownCalls          int                `json:"unknown_calls"`
	Elections             int                `json:"elections"`
	Failovers             int                `json:"failovers"`
	EventGaps             int                `json:"event_gaps"`
	Faults                map[string]int     `json:"faults"`
	Nemesis               nemesisStats       `json:"nemesis"`
	// Cluster is the cluster's own lifetime counters.
	Cluster map[string]uint64 `json:"cluster"`
}

func (h *Harness) report(ops []Op, checks []CheckResult, drainErr error) *Report {
	rep := &Report{
		OK: true, Seed: h.cfg.Seed, Duration: h.cfg.Duration, Net: h.net.Name(), Lease: h.cfg.Lease,
		Started: h.start, Ended: time.Now(), Window: h.obs.Window, Dir: h.cfg.Dir,
		Checks: checks, Faults: ops,
	}
	for _, n := range h.c.Nodes {
		rep.Nodes = append(rep.Nodes, n.Name)
	}
	if drainErr != nil {
		rep.DrainError = drainErr.Error()
	}
	for _, c := range checks {
		if !c.OK() {
			rep.OK = false
		}
	}
	h.mu.Lock()
	stats := h.stats
	h.mu.Unlock()
	rep.Counts = countObservation(h.obs)
	rep.Counts.Nemesis = stats
	for _, op := range ops {
		rep.Counts.Faults[op.Kind]++
	}
	return rep
}

// countObservation tallies runs, attempts, store decisions and elections.
func countObservation(o *Observation) Counts {
	c := Counts{AttemptStates: map[jobs.State]int{}, Faults: map[string]int{}, Cluster: o.Counters, EventGaps: o.EventGaps}
	for _, r := range o.Runs {
		c.Runs++
		if r.State == jobs.Skipped && len(r.Attempts) == 0 {
			c.SkippedRuns++
		}
		for i, a := range r.Attempts {
			c.Attempts++
			c.AttemptStates[a.State]++
			if r.Trigger == "schedule" && a.GrantedAt.Before(r.ScheduledAt) {
				c.GrantedAhead++
			}
			if i > 0 {
				if r.Attempts[i-1].Expired && r.Attempts[i-1].State != jobs.Cancelled {
					c.Takeovers++
					if r.Attempts[i-1].NeverStarted {
						c.NeverStarted++
					}
				} else {
					c.Retries++
				}
			}
			if a.State == jobs.Fenced {
				c.FencedAttempts++
				if refusedAtEstablish(a) {
					c.FencedAtEstablish++
				}
			}
		}
	}
	for _, s := range o.Skips {
		c.SkippedTimes += s.Count
	}
	c.Keys = len(o.Keys)
	for _, h := range o.Histories {
		for _, d := range h {
			c.Decisions++
			switch {
			case d.Outcome == fencedstore.Applied:
				c.Applied++
			case d.Outcome == fencedstore.Established:
				c.Established++
			case d.Outcome == fencedstore.StaleOwner && d.Hash != "":
				c.StalePublishRefused++
			case d.Outcome == fencedstore.StaleOwner:
				c.StaleEstablishRefused++
			case d.Outcome == fencedstore.Expired:
				c.ExpiredRefused++
			}
		}
	}
	c.Calls = len(o.Calls)
	for _, op := range o.Calls {
		if op.Output.(fencemodel.Output).Unknown {
			c.UnknownCalls++
		}
	}
	for _, e := range o.Events {
		if e.Kind == jobs.EventElected {
			c.Elections++
		}
	}
	if c.Elections > 0 {
		c.Failovers = c.Elections - 1
	}
	return c
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Print writes the summary table.
func (r *Report) Print(w io.Writer) {
	verdict := "OK: nothing stale was ever accepted"
	if !r.OK {
		verdict = "VIOLATIONS FOUND"
	}
	fmt.Fprintf(w, "fencecheck  seed %d  %s  %s  lease %s  nodes %s\n", r.Seed, r.Duration, r.Net, r.Lease, strings.Join(r.Nodes, " "))
	fmt.Fprintf(w, "window %s .. %s (%s of scheduled times)\n\n", r.Window.From.Format(timeFmt), r.Window.To.Format(timeFmt), r.Window.To.Sub(r.Window.From).Round(time.Second))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tCHECKED")
	for _, c := range r.Checks {
		res := "ok"
		if !c.OK() {
			res = fmt.Sprintf("FAIL (%d)", c.Violations)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\n", c.Name, res, c.Checked)
	}
	tw.Flush()
	for _, c := range r.Checks {
		for _, d := range c.Details {
			fmt.Fprintf(w, "  ! %s: %s\n", c.Name, d)
		}
		for _, n := range c.Notes {
			fmt.Fprintf(w, "  - %s: %s\n", c.Name, n)
		}
	}

	c := r.Counts
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COUNT\tVALUE")
	rows := [][2]string{
		{"runs", fmt.Sprintf("%d (%d skipped as runs, %d fire times in skip ranges)", c.Runs, c.SkippedRuns, c.SkippedTimes)},
		{"attempts", fmt.Sprintf("%d (%d takeovers after lease expiry, %d of them of attempts that never started; %d retries; %d granted ahead of the scheduled time)", c.Attempts, c.Takeovers, c.NeverStarted, c.Retries, c.GrantedAhead)},
		{"attempt states", tally(c.AttemptStates)},
		{"fenced attempts", fmt.Sprintf("%d (%d before starting, at establish)", c.FencedAttempts, c.FencedAtEstablish)},
		{"stale writes refused", fmt.Sprintf("%d publishes, %d establishes; %d writes with an expired token", c.StalePublishRefused, c.StaleEstablishRefused, c.ExpiredRefused)},
		{"store decisions", fmt.Sprintf("%d on %d keys (%d applied, %d established)", c.Decisions, c.Keys, c.Applied, c.Established)},
		{"store calls seen by the proxy", fmt.Sprintf("%d (%d with an unknown outcome)", c.Calls, c.UnknownCalls)},
		{"elections", fmt.Sprintf("%d (%d failovers)", c.Elections, c.Failovers)},
		{"pauses", fmt.Sprintf("%d by the nemesis, %d self-pauses before publish", c.Nemesis.Pauses, c.Nemesis.SelfPauses)},
		{"kills / restarts", fmt.Sprintf("%d / %d (%d store restarts)", c.Nemesis.Kills, c.Nemesis.Restarts, c.Nemesis.StoreRestarts)},
		{"holders hit between grant and start", fmt.Sprintf("%d killed, %d stopped across the fire time", c.Nemesis.HolderKills, c.Nemesis.HolderPauses)},
		{"partitions", fmt.Sprint(c.Nemesis.Partitions)},
		{"store calls delayed+reordered", fmt.Sprintf("%d in %d holds; %d calls cut or refused in %d outages", c.Nemesis.HeldCalls, c.Nemesis.StoreHolds, c.Nemesis.CutCalls, c.Nemesis.StoreDowns)},
		{"faults", tally(c.Faults)},
		{"cluster counters", tally(c.Cluster)},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	tw.Flush()
	if r.DrainError != "" {
		fmt.Fprintf(w, "\ndrain: %s\n", r.DrainError)
	}
	fmt.Fprintf(w, "\n%s\n", verdict)
}

// tally prints counts as "name n, name n", names sorted.
func tally[K ~string, N int | uint64](m map[K]N) string {
	var parts []string
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
