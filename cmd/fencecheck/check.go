package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/fencemodel"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
)

// Names of the checks, in the order the report shows them.
const (
	CheckStaleWrite     = "no stale write applied"
	CheckStoreReplay    = "store histories replay by the rules"
	CheckPorcupine      = "fenced-register model (porcupine)"
	CheckStoreFencing   = "store fencing invariant and final tokens"
	CheckClientModel    = "store answers linearizable, as clients saw them"
	CheckClientRecord   = "store answers match its recorded history"
	CheckStoreMonotonic = "store tokens and versions never go back"
	CheckStoreVsRuns    = "store agrees with the runs"
	CheckUniqueGrant    = "no (job, scheduled time) granted twice"
	CheckTokenOrder     = "tokens strictly increase over the cluster's life"
	CheckEpochMonotonic = "no node's epoch goes back"
	CheckAccounted      = "every scheduled time run or skipped with a reason"
	CheckTerminal       = "every run in the window finished"
	CheckRunState       = "run states agree with their attempts"
)

// checkOrder lists every check.
var checkOrder = []string{
	CheckStaleWrite, CheckStoreReplay, CheckPorcupine, CheckStoreFencing,
	CheckClientModel, CheckClientRecord, CheckStoreMonotonic,
	CheckStoreVsRuns, CheckUniqueGrant, CheckTokenOrder, CheckEpochMonotonic,
	CheckAccounted, CheckTerminal, CheckRunState, CheckNotEarly,
}

// maxDetails bounds the violations a check lists; it still counts all.
const maxDetails = 20

// CheckResult is one check's verdict.
type CheckResult struct {
	Name string `json:"name"`
	// Checked is how many things (decisions, attempts, fire times) it
	// looked at.
	Checked    int      `json:"checked"`
	Violations int      `json:"violations"`
	Details    []string `json:"details,omitempty"`
	// Notes say what could not be checked and why; they are not failures.
	Notes []string `json:"notes,omitempty"`
}

// OK reports whether the check found nothing wrong.
func (c CheckResult) OK() bool { return c.Violations == 0 }

type results struct {
	byName map[string]*CheckResult
}

func newResults() *results {
	r := &results{byName: map[string]*CheckResult{}}
	for _, n := range checkOrder {
		r.byName[n] = &CheckResult{Name: n}
	}
	return r
}

func (r *results) checked(name string, n int) { r.byName[name].Checked += n }

func (r *results) fail(name, format string, args ...any) {
	c := r.byName[name]
	c.Violations++
	if len(c.Details) < maxDetails {
		c.Details = append(c.Details, fmt.Sprintf(format, args...))
	}
}

func (r *results) note(name, format string, args ...any) {
	c := r.byName[name]
	if len(c.Notes) < maxDetails {
		c.Notes = append(c.Notes, fmt.Sprintf(format, args...))
	}
}

func (r *results) list() []CheckResult {
	out := make([]CheckResult, 0, len(checkOrder))
	for _, n := range checkOrder {
		out = append(out, *r.byName[n])
	}
	return out
}

// CheckOptions tune the checks.
type CheckOptions struct {
	// GrantSlack is how far apart in time two grants must be proposed for
	// the later one to be required to carry the greater token (proposals
	// of one leader can commit in another order than they were stamped).
	GrantSlack time.Duration
	// PorcupineTimeout bounds the model check of one history.
	PorcupineTimeout time.Duration
	// VisualizeDir, if set, receives porcupine's visualization of a
	// history the model cannot explain.
	VisualizeDir string
}

// Check runs every check over an observation.
func Check(o *Observation, opt CheckOptions) []CheckResult {
	if opt.GrantSlack <= 0 {
		opt.GrantSlack = time.Second
	}
	if opt.PorcupineTimeout <= 0 {
		opt.PorcupineTimeout = time.Minute
	}
	r := newResults()
	checkStore(o, opt, r)
	checkClientCalls(o, opt, r)
	checkStoreMonotonic(o, r)
	checkStoreVsRuns(o, r)
	checkUniqueGrants(o, r)
	checkTokenOrder(o, opt, r)
	checkEpochs(o, r)
	checkAccounted(o, r)
	checkRuns(o, r)
	checkNotEarly(o, r)
	return r.list()
}

// accepted reports whether a decision raised (or kept) the key's greatest
// token to the call's: everything but a stale_owner or expired refusal.
func accepted(d fencedstore.Decision) bool { return d.Outcome.Accepted() }

func newer(a, b fencedstore.Token) fencedstore.Token {
	if a.Less(b) {
		return b
	}
	return a
}

// checkStore judges each key's complete history on its own: the fencing
// invariant stated directly, a replay through the rules, the porcupine
// model, and fencemodel's checker against the final state.
func checkStore(o *Observation, opt CheckOptions, r *results) {
	final := map[string]fencedstore.Token{}
	for _, m := range o.Keys {
		final[m.Key] = m.Greatest
	}
	keys := make([]string, 0, len(o.Histories))
	for k := range o.Histories {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var all []porcupine.Operation
	opsOf := map[string][]porcupine.Operation{}
	for _, key := range keys {
		h := o.Histories[key]
		r.checked(CheckStaleWrite, len(h))
		r.checked(CheckStoreReplay, len(h))
		if len(h) > 0 && !h[0].Greatest.IsZero() {
			// The store dropped the oldest decisions (history_retention):
			// the rest is judged from where it starts.
			r.note(CheckStoreReplay, "%s: history starts at greatest %s (older decisions were not retained); replayed from there", key, h[0].Greatest)
		}

		// The invariant itself: no applied write older than anything
		// accepted before it.
		var max fencedstore.Token
		var maxBy string
		for i, d := range h {
			if d.Outcome == fencedstore.Applied && d.Token.Less(max) {
				r.fail(CheckStaleWrite, "%s: decision %d applied a write with token %s by %s after %s (by %s) had been accepted", key, i, d.Token, d.Attempt, max, maxBy)
			}
			if accepted(d) && max.Less(d.Token) {
				max, maxBy = d.Token, d.Attempt
			}
		}

		if err := replay(h); err != nil {
			r.fail(CheckStoreReplay, "%s: %v", key, err)
		}

		ops := operations(key, h, int64(2*len(all)))
		all = append(all, ops...)
		opsOf[key] = ops
		if _, ok := final[key]; !ok {
			r.fail(CheckStoreFencing, "%s: has a history but is not listed by the store", key)
			continue
		}
		for _, err := range fencemodel.CheckFencing(ops, map[string]fencedstore.Token{key: final[key]}) {
			r.fail(CheckStoreFencing, "%v", err)
		}
		r.checked(CheckStoreFencing, len(ops))
	}
	for _, m := range o.Keys {
		if _, ok := o.Histories[m.Key]; !ok {
			r.fail(CheckStoreFencing, "%s: listed (greatest %s, v%d) but has no history", m.Key, m.Greatest, m.Version)
		}
		h := o.Histories[m.Key]
		if last, ok := lastApplied(h); ok && (last.Version != m.Version || last.Token != m.Token || last.Attempt != m.Attempt || last.Hash != m.Hash) {
			r.fail(CheckStoreFencing, "%s: current body is v%d by %s (%s); its last applied decision says v%d by %s (%s)", m.Key, m.Version, m.Attempt, m.Token, last.Version, last.Attempt, last.Token)
		}
	}

	r.checked(CheckPorcupine, len(all))
	if len(all) > 0 {
		res, info := fencemodel.Check(all, opt.PorcupineTimeout)
		switch res {
		case porcupine.Illegal:
			for _, d := range describeIllegal(info, opsOf) {
				r.fail(CheckPorcupine, "%s", d)
			}
			if opt.VisualizeDir != "" {
				path := filepath.Join(opt.VisualizeDir, "porcupine.html")
				if err := porcupine.VisualizePath(fencemodel.Model, info, path); err == nil {
					r.note(CheckPorcupine, "visualization of the failed check: %s", path)
				}
			}
		case porcupine.Unknown:
			r.note(CheckPorcupine, "porcupine gave up after %s", opt.PorcupineTimeout)
		}
	}
}

func lastApplied(h []fencedstore.Decision) (fencedstore.Decision, bool) {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Outcome == fencedstore.Applied {
			return h[i], true
		}
	}
	return fencedstore.Decision{}, false
}

// replay is fencemodel.CheckHistory for a history that may start after
// the key's first decision: it starts from the state the first decision
// saw.
func replay(h []fencedstore.Decision) error {
	if len(h) == 0 || h[0].Greatest.IsZero() {
		return fencemodel.CheckHistory(h)
	}
	// Retention dropped the beginning: check only that the greatest token
	// never goes back and no applied write is older than it.
	g := h[0].Greatest
	for i, d := range h {
		if d.Greatest.Less(g) {
			return fmt.Errorf("decision %d: greatest-before %s is older than %s, seen earlier", i, d.Greatest, g)
		}
		if accepted(d) {
			g = newer(d.Greatest, d.Token)
		}
	}
	return nil
}

// operations turns a key's recorded history into porcupine operations.
// The store decided them one at a time, so each gets its own slot in
// time, starting at base; the model then has to explain every outcome,
// version and greatest token.
func operations(key string, h []fencedstore.Decision, base int64) []porcupine.Operation {
	ops := make([]porcupine.Operation, 0, len(h))
	for i, d := range h {
		in := fencemodel.Input{Key: key, Token: d.Token, Attempt: d.Attempt, Hash: d.Hash, Expected: fencemodel.NoVersion, Expires: d.Expires}
		// A refused publish records the body's hash, an establish none.
		in.Kind = fencemodel.Establish
		if d.Hash != "" || d.Outcome == fencedstore.Applied || d.Outcome == fencedstore.Conflict {
			in.Kind = fencemodel.Publish
		}
		if d.Outcome == fencedstore.Conflict {
			// Workers never send an expected version; a conflict can
			// only come from a version other than the key's.
			in.Expected = int64(d.Version) + 1
		}
		after := d.Greatest
		if accepted(d) {
			after = newer(d.Greatest, d.Token)
		}
		out := fencemodel.Output{Outcome: d.Outcome, Version: d.Version, Greatest: after}
		ops = append(ops, porcupine.Operation{ClientId: i, Input: in, Output: out, Call: base + int64(2*i), Return: base + int64(2*i) + 1})
	}
	return ops
}

// describeIllegal names, for each key the model cannot explain, the first
// decision no sequence of the rules accounts for: the histories are
// sequential, so the longest partial linearization ends just before it.
func describeIllegal(info porcupine.LinearizationInfo, opsOf map[string][]porcupine.Operation) []string {
	var out []string
	for _, part := range info.PartialLinearizationsOperations() {
		longest := 0
		key := ""
		for _, lin := range part {
			if len(lin) > 0 {
				key = lin[0].Input.(fencemodel.Input).Key
			}
			longest = max(longest, len(lin))
		}
		ops := opsOf[key]
		if key == "" || longest >= len(ops) {
			continue
		}
		op := ops[longest]
		out = append(out, fmt.Sprintf("%s: the rules explain the first %d of %d decisions; not decision %d, %s",
			key, longest, len(ops), longest, fencemodel.Model.DescribeOperation(op.Input, op.Output)))
	}
	if len(out) == 0 {
		out = append(out, "the store's histories are not explained by any sequence of the rules")
	}
	return out
}

// checkClientCalls judges the store by its answers, not by its own
// record: the calls the proxy saw, each with the real-time window in which
// the store must have decided it, must be explained by one sequence of the
// rules (porcupine), must keep the fencing invariant (fencemodel), and
// must agree with the history the store recorded.
func checkClientCalls(o *Observation, opt CheckOptions, r *results) {
	if len(o.Calls) == 0 {
		r.note(CheckClientModel, "no calls recorded")
		return
	}
	r.checked(CheckClientModel, len(o.Calls))
	res, info := fencemodel.Check(o.Calls, opt.PorcupineTimeout)
	switch res {
	case porcupine.Illegal:
		r.fail(CheckClientModel, "no sequence of the rules explains the store's answers (%d calls)", len(o.Calls))
		if opt.VisualizeDir != "" {
			path := filepath.Join(opt.VisualizeDir, "porcupine-calls.html")
			if err := porcupine.VisualizePath(fencemodel.Model, info, path); err == nil {
				r.note(CheckClientModel, "visualization: %s", path)
			}
		}
	case porcupine.Unknown:
		r.note(CheckClientModel, "porcupine gave up after %s", opt.PorcupineTimeout)
	}
	final := map[string]fencedstore.Token{}
	for _, m := range o.Keys {
		final[m.Key] = m.Greatest
	}
	for _, err := range fencemodel.CheckFencing(o.Calls, final) {
		r.fail(CheckClientModel, "%v", err)
	}
	unknown := 0
	for _, op := range o.Calls {
		if op.Output.(fencemodel.Output).Unknown {
			unknown++
		}
	}
	if unknown > 0 {
		r.note(CheckClientModel, "%d calls with an unknown outcome (cut in flight or failed): may or may not have taken effect", unknown)
	}

	// The answers and the record, as multisets.
	type callKey struct {
		key, attempt string
		token        fencedstore.Token
		kind         fencemodel.Kind
	}
	type answerKey struct {
		callKey
		outcome fencedstore.Outcome
		version uint64
	}
	decided := map[answerKey]int{}
	asked := map[callKey]int{}
	for _, op := range o.Calls {
		in, out := op.Input.(fencemodel.Input), op.Output.(fencemodel.Output)
		ck := callKey{in.Key, in.Attempt, in.Token, in.Kind}
		asked[ck]++
		if !out.Unknown {
			decided[answerKey{ck, out.Outcome, out.Version}]++
		}
	}
	recorded := map[answerKey]int{}
	for key, h := range o.Histories {
		for _, d := range h {
			r.checked(CheckClientRecord, 1)
			// A publish's decision records its body's hash, an
			// establish's none.
			kind := fencemodel.Publish
			if d.Hash == "" && d.Outcome != fencedstore.Applied && d.Outcome != fencedstore.Conflict {
				kind = fencemodel.Establish
			}
			ck := callKey{key, d.Attempt, d.Token, kind}
			recorded[answerKey{ck, d.Outcome, d.Version}]++
			if asked[ck] == 0 {
				r.fail(CheckClientRecord, "%s: the store recorded %s %s by %s (v%d), which no client sent", key, kind, d.Token, d.Attempt, d.Version)
			}
			asked[ck]--
		}
	}
	for ak, n := range decided {
		if recorded[ak] < n {
			r.fail(CheckClientRecord, "%s: the store answered %s %s by %s with %s v%d %d times, its history records it %d times",
				ak.key, ak.kind, ak.token, ak.attempt, ak.outcome, ak.version, n, recorded[ak])
		}
	}
}

// checkStoreMonotonic compares the store's listings over time, across
// store restarts: no key's greatest token or version ever goes back, and
// no key disappears.
func checkStoreMonotonic(o *Observation, r *results) {
	r.checked(CheckStoreMonotonic, o.StoreListings)
	keys := make([]string, 0, len(o.StoreSeries))
	for k := range o.StoreSeries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		series := o.StoreSeries[k]
		for i := 1; i < len(series); i++ {
			p, m := series[i-1], series[i]
			if m.At.IsZero() {
				break // gone: reported below
			}
			if m.Greatest.Less(p.Greatest) || m.Version < p.Version {
				r.fail(CheckStoreMonotonic, "%s: greatest %s v%d at %s, after greatest %s v%d at %s", k, m.Greatest, m.Version, m.At.Format(timeFmt), p.Greatest, p.Version, p.At.Format(timeFmt))
			}
		}
	}
	for _, m := range o.StoreMissing {
		r.fail(CheckStoreMonotonic, "%s", m)
	}
}

const timeFmt = "15:04:05.000"

// checkStoreVsRuns cross-checks the two planes: every decision carries the
// token the cluster minted for its attempt and touches only that run's
// output; every outcome the cluster recorded for an attempt is the one the
// store decided.
func checkStoreVsRuns(o *Observation, r *results) {
	byAttempt := map[string]AttemptOf{}
	for _, a := range o.Attempts() {
		byAttempt[a.Attempt.ID] = a
	}
	type decided struct {
		key string
		d   fencedstore.Decision
	}
	decisions := map[string][]decided{}
	unknown := 0
	for key, h := range o.Histories {
		for _, d := range h {
			r.checked(CheckStoreVsRuns, 1)
			decisions[d.Attempt] = append(decisions[d.Attempt], decided{key, d})
			a, ok := byAttempt[d.Attempt]
			if !ok {
				unknown++
				continue
			}
			if a.Attempt.Token != d.Token {
				r.fail(CheckStoreVsRuns, "%s: %s by %s carries token %s; the cluster granted that attempt %s", key, d.Outcome, d.Attempt, d.Token, a.Attempt.Token)
			}
			if a.Run.Output != key {
				r.fail(CheckStoreVsRuns, "%s: %s by %s, whose run's output is %q", key, d.Outcome, d.Attempt, a.Run.Output)
			}
		}
	}
	if unknown > 0 {
		r.note(CheckStoreVsRuns, "%d decisions by attempts the collector never saw (runs dropped by the cluster before they were read)", unknown)
	}
	for _, a := range o.Attempts() {
		at := a.Attempt
		if a.Run.Output == "" {
			continue
		}
		r.checked(CheckStoreVsRuns, 1)
		has := func(out fencedstore.Outcome, version uint64) bool {
			for _, x := range decisions[at.ID] {
				if x.key == a.Run.Output && x.d.Outcome == out && (version == 0 || x.d.Version == version) {
					return true
				}
			}
			return false
		}
		switch {
		case at.StoreOutcome == string(fencedstore.Applied) && !has(fencedstore.Applied, at.StoreVersion):
			r.fail(CheckStoreVsRuns, "attempt %s (%s) is recorded as published v%d to %s; the store has no such applied write", at.ID, at.Token, at.StoreVersion, a.Run.Output)
		case at.StoreOutcome == string(fencedstore.StaleOwner) && !has(fencedstore.StaleOwner, 0):
			r.fail(CheckStoreVsRuns, "attempt %s (%s) is recorded as refused stale at %s; the store never refused it", at.ID, at.Token, a.Run.Output)
		case at.StoreOutcome == string(fencedstore.Expired) && !has(fencedstore.Expired, 0):
			r.fail(CheckStoreVsRuns, "attempt %s (%s) is recorded as refused expired at %s; the store never refused it", at.ID, at.Token, a.Run.Output)
		case at.State == jobs.Succeeded && at.StoreOutcome != string(fencedstore.Applied):
			r.fail(CheckStoreVsRuns, "attempt %s succeeded but its store outcome is %q, not applied", at.ID, at.StoreOutcome)
		case at.State == jobs.Fenced && at.StoreOutcome != string(fencedstore.StaleOwner) && at.StoreOutcome != string(fencedstore.Expired):
			r.fail(CheckStoreVsRuns, "attempt %s is fenced but its store outcome is %q", at.ID, at.StoreOutcome)
		}
	}
}

// checkUniqueGrants: one run per (job, scheduled time), each attempt
// granted once with one token, wherever and whenever it was read.
func checkUniqueGrants(o *Observation, r *results) {
	for id, ss := range o.Sightings {
		r.checked(CheckUniqueGrant, 1)
		if len(ss) > 1 {
			var b []string
			for _, s := range ss {
				b = append(b, fmt.Sprintf("%s on %s at %s", s.Token, s.Node, s.At.Format(timeFmt)))
			}
			r.fail(CheckUniqueGrant, "attempt %s was seen with %d tokens: %s", id, len(ss), strings.Join(b, ", "))
		}
	}
	type key struct {
		job string
		at  int64
	}
	runOf := map[key]string{}
	for id, run := range o.Runs {
		k := key{run.Job, run.ScheduledAt.UnixNano()}
		if other, ok := runOf[k]; ok {
			r.fail(CheckUniqueGrant, "runs %s and %s share job %s and scheduled time %s", other, id, run.Job, run.ScheduledAt.Format(time.RFC3339Nano))
		}
		runOf[k] = id
		if want := jobs.RunID(run.Job, run.ScheduledAt); want != id {
			r.fail(CheckUniqueGrant, "run %s has job %s and scheduled time %s, whose id is %s", id, run.Job, run.ScheduledAt.Format(time.RFC3339Nano), want)
		}
	}
	granted := map[string]jobs.Event{}
	for _, e := range o.Events {
		if e.Kind != jobs.EventGranted {
			continue
		}
		r.checked(CheckUniqueGrant, 1)
		if prev, ok := granted[e.Attempt]; ok {
			r.fail(CheckUniqueGrant, "attempt %s granted twice: at index %d (%s) and at index %d (%s)", e.Attempt, prev.Index, tokenText(prev.Token), e.Index, tokenText(e.Token))
		}
		granted[e.Attempt] = e
	}
}

func tokenText(f *jobs.Fence) string {
	if f == nil {
		return "no token"
	}
	return f.String()
}

// checkTokenOrder: tokens are ordered as the grants were, across
// elections and restarts, and each belongs to one attempt per key: a log
// index grants one attempt, or (a batch grant) the first attempts of
// several runs of different jobs no key of which can be written by
// another of them (sharesToken); by log index the epochs never go back,
// a grant proposed later carries a greater token, and every grant carries
// the epoch of the election entry before it.
func checkTokenOrder(o *Observation, opt CheckOptions, r *results) {
	atts := o.Attempts()
	r.checked(CheckTokenOrder, len(atts))
	byIndex := append([]AttemptOf(nil), atts...)
	sort.SliceStable(byIndex, func(i, j int) bool { return byIndex[i].Attempt.Token.Seq < byIndex[j].Attempt.Token.Seq })
	for i := 1; i < len(byIndex); i++ {
		p, a := byIndex[i-1].Attempt, byIndex[i].Attempt
		switch {
		case p.Token.Seq == a.Token.Seq:
			// Every earlier attempt of the same index, not only the one
			// just before.
			for k := i - 1; k >= 0 && byIndex[k].Attempt.Token.Seq == a.Token.Seq; k-- {
				if why := sharesToken(o, byIndex[k], byIndex[i]); why != "" {
					r.fail(CheckTokenOrder, "attempts %s (%s) and %s (%s) share log index %d: %s", byIndex[k].Attempt.ID, byIndex[k].Attempt.Token, a.ID, a.Token, a.Token.Seq, why)
				}
			}
		case a.Token.Epoch < p.Token.Epoch:
			r.fail(CheckTokenOrder, "attempt %s has token %s at a later log index than %s (%s): the epoch went back", a.ID, a.Token, p.ID, p.Token)
		}
	}
	// By the time each grant was proposed.
	byTime := append([]AttemptOf(nil), atts...)
	sort.SliceStable(byTime, func(i, j int) bool { return byTime[i].Attempt.GrantedAt.Before(byTime[j].Attempt.GrantedAt) })
	var best AttemptOf // the greatest token among grants proposed more than GrantSlack earlier
	j := 0
	for _, a := range byTime {
		for ; j < len(byTime) && byTime[j].Attempt.GrantedAt.Before(a.Attempt.GrantedAt.Add(-opt.GrantSlack)); j++ {
			if best.Attempt.ID == "" || best.Attempt.Token.Less(byTime[j].Attempt.Token) {
				best = byTime[j]
			}
		}
		if best.Attempt.ID != "" && a.Attempt.Token.Less(best.Attempt.Token) {
			r.fail(CheckTokenOrder, "attempt %s granted at %s has token %s, older than %s of %s granted at %s", a.Attempt.ID, a.Attempt.GrantedAt.Format(timeFmt), a.Attempt.Token, best.Attempt.Token, best.Attempt.ID, best.Attempt.GrantedAt.Format(timeFmt))
		}
	}
	// Against the election entries of the trail.
	var elected []jobs.Event
	for _, e := range o.Events {
		if e.Kind == jobs.EventElected {
			if n := len(elected); n > 0 && e.Epoch <= elected[n-1].Epoch {
				r.fail(CheckTokenOrder, "election entry at index %d has epoch %d, not above %d of the one at index %d", e.Index, e.Epoch, elected[n-1].Epoch, elected[n-1].Index)
			}
			elected = append(elected, e)
		}
	}
	for _, a := range atts {
		seq := a.Attempt.Token.Seq
		i := sort.Search(len(elected), func(i int) bool { return elected[i].Index >= seq }) - 1
		if i < 0 || o.trailGap(elected[i].Index, seq) {
			continue // the election entry before it was not read
		}
		if e := elected[i]; a.Attempt.Token.Epoch != e.Epoch {
			r.fail(CheckTokenOrder, "attempt %s has token %s, but the last election entry before index %d is epoch %d (%s at index %d)", a.Attempt.ID, a.Attempt.Token, seq, e.Epoch, e.Node, e.Index)
		}
	}
}

// sharesToken says why two attempts granted at one log index may not
// share its token, or "" if they may: the first attempts of runs of two
// different jobs, with the same token, whose keys cannot meet (neither
// job's token scope or output key is a prefix of the other's).
func sharesToken(o *Observation, x, y AttemptOf) string {
	switch {
	case x.Attempt.Token != y.Attempt.Token:
		return "with different epochs"
	case x.Run.Job == y.Run.Job:
		return "of the same job"
	case x.Attempt.Number != 1 || y.Attempt.Number != 1:
		return "a batch grants first attempts only"
	}
	keys := func(a AttemptOf) []string {
		out := []string{a.Run.Output}
		for _, spec := range o.Jobs {
			if spec.Name == a.Run.Job {
				out = append(out, spec.OutputPrefix())
			}
		}
		return out
	}
	for _, k := range keys(x) {
		for _, l := range keys(y) {
			if k != "" && l != "" && (strings.HasPrefix(k, l) || strings.HasPrefix(l, k)) {
				return fmt.Sprintf("their keys meet (%q, %q)", k, l)
			}
		}
	}
	return ""
}

// checkEpochs: within one process's life, a node's epoch never goes back.
// (A restarted node replays its log and may briefly report an older one.)
func checkEpochs(o *Observation, r *results) {
	type life struct {
		node string
		n    int
	}
	last := map[life]EpochSample{}
	for _, s := range o.EpochSamples {
		r.checked(CheckEpochMonotonic, 1)
		k := life{s.Node, s.Life}
		if p, ok := last[k]; ok && s.Epoch < p.Epoch {
			r.fail(CheckEpochMonotonic, "%s (process %d) reported epoch %d at %s after %d at %s", s.Node, s.Life, s.Epoch, s.At.Format(timeFmt), p.Epoch, p.At.Format(timeFmt))
		}
		last[k] = s
	}
}

// checkAccounted: every fire time of every job in the window is either a
// run or inside a skip range, never both, and every skip says why.
func checkAccounted(o *Observation, r *results) {
	if o.Window.To.IsZero() || !o.Window.To.After(o.Window.From) {
		r.note(CheckAccounted, "no window to check")
		return
	}
	for _, spec := range o.Jobs {
		sched, err := spec.Schedule()
		if err != nil {
			r.fail(CheckAccounted, "job %s: schedule: %v", spec.Name, err)
			continue
		}
		runs := map[int64]jobs.Run{}
		for _, run := range o.Runs {
			if run.Job == spec.Name && run.Trigger != "manual" {
				runs[run.ScheduledAt.UnixNano()] = run
			}
		}
		var skips []jobs.SkipRange
		for _, s := range o.Skips {
			if s.Job != spec.Name {
				continue
			}
			skips = append(skips, s)
			if s.Reason == "" {
				r.fail(CheckAccounted, "job %s: %d fire times from %s skipped without a reason", spec.Name, s.Count, s.From.Format(time.RFC3339))
			}
			// The count must be the fire times the range spans.
			n := 0
			for t := s.From; !t.IsZero() && !t.After(s.To) && n <= s.Count; t = sched.Next(t) {
				n++
			}
			if n != s.Count {
				r.fail(CheckAccounted, "job %s: skip range %s..%s says %d fire times, the schedule has %d", spec.Name, s.From.Format(time.RFC3339), s.To.Format(time.RFC3339), s.Count, n)
			}
		}
		for t := sched.Next(o.Window.From); !t.IsZero() && !t.After(o.Window.To); t = sched.Next(t) {
			r.checked(CheckAccounted, 1)
			run, granted := runs[t.UnixNano()]
			var in []jobs.SkipRange
			for _, s := range skips {
				if !t.Before(s.From) && !t.After(s.To) {
					in = append(in, s)
				}
			}
			switch {
			case granted && len(in) > 0:
				r.fail(CheckAccounted, "%s: run %s exists and the time is also skipped (%s)", t.Format(time.RFC3339), run.ID, in[0].Reason)
			case len(in) > 1:
				r.fail(CheckAccounted, "job %s, %s: skipped by %d ranges", spec.Name, t.Format(time.RFC3339), len(in))
			case granted && run.State == jobs.Skipped && run.Reason == "":
				r.fail(CheckAccounted, "run %s skipped without a reason", run.ID)
			case !granted && len(in) == 0:
				r.fail(CheckAccounted, "job %s, %s: no run and no recorded skip", spec.Name, t.Format(time.RFC3339))
			}
		}
	}
}

// refusedAtEstablish reports whether the worker's account of a says the
// store refused it at establish, before anything started.
func refusedAtEstablish(a jobs.Attempt) bool { return strings.HasPrefix(a.Error, "establish") }

// checkRuns: at the end, every run in the window finished, and a run's
// state is its newest attempt's, except that a run waiting for its retry
// is pending and one whose retry a replacing run cancelled is cancelled.
func checkRuns(o *Observation, r *results) {
	ids := make([]string, 0, len(o.Runs))
	for id := range o.Runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		run := o.Runs[id]
		inWindow := run.ScheduledAt.After(o.Window.From) && !run.ScheduledAt.After(o.Window.To)
		if inWindow {
			r.checked(CheckTerminal, 1)
			if !run.State.Terminal() {
				a, _ := run.Latest()
				desc := "no attempt"
				if a != nil {
					desc = fmt.Sprintf("attempt %d on %s is %s", a.Number, a.Worker, a.State)
				}
				r.fail(CheckTerminal, "run %s is still %s (%s)", id, run.State, desc)
			}
		}
		r.checked(CheckRunState, 1)
		a, ok := run.Latest()
		switch {
		case !ok && run.State != jobs.Skipped:
			r.fail(CheckRunState, "run %s is %s without any attempt", id, run.State)
		case ok && run.State != a.State && !fsm.AwaitsRetry(run) && !(run.NoRetry && run.State == jobs.Cancelled && fsm.Retryable(a.State)):
			r.fail(CheckRunState, "run %s is %s, its newest attempt %s is %s", id, run.State, a.ID, a.State)
		}
		for i, at := range run.Attempts {
			if at.Number != i+1 || at.ID != jobs.AttemptID(run.ID, i+1) {
				r.fail(CheckRunState, "run %s: attempt %d is numbered %d with id %s", id, i+1, at.Number, at.ID)
			}
			if i > 0 && !run.Attempts[i-1].Token.Less(at.Token) {
				r.fail(CheckRunState, "run %s: attempt %d has token %s, not newer than attempt %d's %s", id, at.Number, at.Token, i, run.Attempts[i-1].Token)
			}
			if i < len(run.Attempts)-1 && !at.State.Terminal() {
				r.fail(CheckRunState, "run %s: attempt %d is %s though attempt %d was granted after it", id, at.Number, at.State, i+2)
			}
			// Not counted against the retries because it never started
			// (scheduler/fsm/startconfirm.go): its worker must agree. A
			// refusal at establish comes before any start.
			published := at.StoreOutcome != "" && !refusedAtEstablish(at)
			if at.NeverStarted && (!at.StartedAt.IsZero() || published) {
				r.fail(CheckRunState, "run %s: attempt %d was taken as never started, but its worker reports a start at %s (store outcome %q)", id, at.Number, at.StartedAt.Format(timeFmt), at.StoreOutcome)
			}
		}
	}
}
