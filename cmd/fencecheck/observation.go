package main

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

// Observation is everything the harness read from a cluster and its store:
// what the checks judge. The collector fills it while the nemesis runs (the
// cluster keeps only its newest runs and events, so they are read as they
// happen) and once more at the end.
type Observation struct {
	// Jobs is the job set the cluster ran, unchanged during the window.
	Jobs []jobs.Spec
	// Window is the span of scheduled times every fire time must be
	// accounted for in: after the job set was applied, up to the moment
	// the last fault was healed.
	Window Window

	// Runs holds every run seen, by id, in its most advanced state.
	Runs map[string]jobs.Run
	// Sightings is, per attempt id, every distinct token a node reported
	// for it; more than one means the attempt (or its run) was granted
	// twice, or replicas disagree.
	Sightings map[string][]Sighting
	// Events is the audit trail, by sequence number; EventGaps counts
	// entries the cluster dropped (it keeps the newest only) before the
	// collector read them.
	Events    []jobs.Event
	EventGaps int
	// Gaps are the spans of log indexes (exclusive) whose events were
	// not read.
	Gaps     []IndexSpan
	Skips    []jobs.SkipRange
	Counters map[string]uint64

	// Calls are the establishes and publishes as the store proxy saw
	// them: each from the moment it left for the store to the moment its
	// answer came back (never, for an unknown outcome).
	Calls []porcupine.Operation

	// Keys and Histories are the store's final state and every decision
	// on every key.
	Keys      []fencedstore.Meta
	Histories map[string][]fencedstore.Decision
	// StoreSeries is, per key, every change of its greatest token or
	// version that the periodic listings saw, faults or not, and
	// StoreMissing every key a listing lacked after an earlier one had
	// it; StoreListings counts the listings.
	StoreSeries   map[string][]KeyState
	StoreMissing  []string
	StoreListings int
	// EpochSamples are every server's epoch, read periodically.
	EpochSamples []EpochSample
}

// Window is a span of scheduled times: From exclusive, To inclusive.
type Window struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Sighting is a token some node reported for an attempt.
type Sighting struct {
	Token jobs.Fence `json:"token"`
	Node  string     `json:"node"`
	At    time.Time  `json:"at"`
}

// KeyState is a key's greatest token and version as a listing showed it.
type KeyState struct {
	At       time.Time         `json:"at"`
	Greatest fencedstore.Token `json:"greatest"`
	Version  uint64            `json:"version"`
}

// AddStoreListing records what a listing of the whole store showed: only
// changes are kept, so a long run stays small.
func (o *Observation) AddStoreListing(at time.Time, keys []fencedstore.Meta) {
	o.StoreListings++
	listed := map[string]bool{}
	for _, m := range keys {
		listed[m.Key] = true
		ks := KeyState{At: at, Greatest: m.Greatest, Version: m.Version}
		series := o.StoreSeries[m.Key]
		if n := len(series); n > 0 && series[n-1].Greatest == ks.Greatest && series[n-1].Version == ks.Version {
			continue
		}
		o.StoreSeries[m.Key] = append(series, ks)
	}
	for k, series := range o.StoreSeries {
		if !listed[k] && !series[len(series)-1].At.IsZero() {
			o.StoreMissing = append(o.StoreMissing, fmt.Sprintf("%s: listed at %s (greatest %s, v%d), missing at %s",
				k, series[len(series)-1].At.Format(timeFmt), series[len(series)-1].Greatest, series[len(series)-1].Version, at.Format(timeFmt)))
			// Report it once: a zero time marks it gone.
			o.StoreSeries[k] = append(series, KeyState{})
		}
	}
}

// EpochSample is the epoch one node reported, in its Life-th process.
type EpochSample struct {
	At    time.Time
	Node  string
	Life  int
	Epoch uint64
}

// NewObservation returns an empty observation.
func NewObservation() *Observation {
	return &Observation{
		Runs: map[string]jobs.Run{}, Sightings: map[string][]Sighting{},
		Histories: map[string][]fencedstore.Decision{}, Counters: map[string]uint64{},
		StoreSeries: map[string][]KeyState{},
	}
}

// AddRuns merges runs a node reported: each attempt's token is recorded as
// a sighting, and a run replaces what was known of it if it is at least
// as advanced (a lagging follower never rolls a run back).
func (o *Observation) AddRuns(node string, at time.Time, runs []jobs.Run) {
	for _, r := range runs {
		for _, a := range r.Attempts {
			o.sight(a.ID, Sighting{Token: a.Token, Node: node, At: at})
		}
		if old, ok := o.Runs[r.ID]; !ok || progress(r) >= progress(old) {
			o.Runs[r.ID] = r
		}
	}
}

func (o *Observation) sight(attempt string, s Sighting) {
	for _, old := range o.Sightings[attempt] {
		if old.Token == s.Token {
			return
		}
	}
	o.Sightings[attempt] = append(o.Sightings[attempt], s)
}

// progress orders the states one run goes through: more attempts, then
// more of them finished, then the run finished.
func progress(r jobs.Run) int {
	p := 4 * len(r.Attempts) * (len(r.Attempts) + 1)
	for _, a := range r.Attempts {
		if a.State.Terminal() {
			p += 2
		}
		if a.State != jobs.Pending {
			p++
		}
	}
	if r.State.Terminal() {
		p++
	}
	return p
}

// AddEvents merges a page of the audit trail read after the last known
// sequence number; a jump in the numbers is counted as a gap.
func (o *Observation) AddEvents(evs []jobs.Event) {
	last := uint64(0)
	if n := len(o.Events); n > 0 {
		last = o.Events[n-1].Seq
	}
	for _, e := range evs {
		if e.Seq <= last {
			continue
		}
		if e.Seq > last+1 {
			o.EventGaps += int(e.Seq - last - 1)
			from := uint64(0)
			if n := len(o.Events); n > 0 {
				from = o.Events[n-1].Index
			}
			o.Gaps = append(o.Gaps, IndexSpan{From: from, To: e.Index})
		}
		o.Events = append(o.Events, e)
		last = e.Seq
	}
}

// IndexSpan is a span of Raft log indexes, both ends exclusive.
type IndexSpan struct{ From, To uint64 }

// trailGap reports whether events between log indexes from and to
// (exclusive) may be missing.
func (o *Observation) trailGap(from, to uint64) bool {
	if len(o.Events) == 0 {
		return true
	}
	for _, g := range o.Gaps {
		if g.To > from && g.From < to {
			return true
		}
	}
	return false
}

// AddSkips merges skip ranges (the cluster keeps the newest ones only).
func (o *Observation) AddSkips(rs []jobs.SkipRange) {
	for _, r := range rs {
		if !slices.ContainsFunc(o.Skips, func(s jobs.SkipRange) bool {
			return s.Job == r.Job && s.From.Equal(r.From) && s.To.Equal(r.To) && s.Count == r.Count && s.Reason == r.Reason
		}) {
			o.Skips = append(o.Skips, r)
		}
	}
}

// Attempts returns every attempt seen, in token order.
func (o *Observation) Attempts() []AttemptOf {
	var out []AttemptOf
	for _, r := range o.Runs {
		for _, a := range r.Attempts {
			out = append(out, AttemptOf{Run: r, Attempt: a})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].Attempt.Token.Compare(out[j].Attempt.Token); c != 0 {
			return c < 0
		}
		return out[i].Attempt.ID < out[j].Attempt.ID
	})
	return out
}

// AttemptOf is an attempt with its run.
type AttemptOf struct {
	Run     jobs.Run
	Attempt jobs.Attempt
}
