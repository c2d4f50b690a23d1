package pages

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

// The picture: a server-rendered SVG of a job's or a key's recent
// history. Leadership epochs are bands across the whole height, each
// worker is a lane, each attempt a bar on its worker's lane (granted →
// started thin, started → ended thick, coloured by state, labelled with
// its fence token), an expired lease a dashed tick, and every decision of
// the fenced store a mark on a store lane; a refused stale write is also
// a red cross on the lane of the worker that tried it. So the report
// handoff reads left to right: w1's bar in epoch 3 stops at "lease
// expired", w2's bar with a newer token is published, and w1's late write
// is a cross after it.

// timelineData is what a timeline is drawn from.
type timelineData struct {
	Title     string
	Runs      []jobs.Run
	Decisions []keyedDecision
	// Events is the audit trail: elections make the bands, expiries the
	// expiry ticks.
	Events []jobs.Event
	Now    time.Time
}

// keyedDecision is one store decision on one key.
type keyedDecision struct {
	Key string
	fencedstore.Decision
}

// Layout, in SVG user units.
const (
	tlWidth     = 1100.0
	tlPlotX     = 130.0
	tlPlotRight = 16.0
	tlLanesTop  = 70.0
	tlLaneH     = 42.0
	tlBarH      = 20.0
)

// svgTimeline is a laid-out timeline, ready for templates/timeline.svg.
type svgTimeline struct {
	Title         string
	Width, Height float64
	PlotX, PlotW  float64
	PlotBottom    float64
	From, To      string
	Ticks         []svgTick
	Bands         []svgBand
	Elections     []svgTick
	Lanes         []svgLane
	Bars          []svgBar
	Marks         []svgMark
	// Late are dashed lines from an attempt's bar to its own refused
	// write: the time it spent stalled, believing it still owned the run.
	Late []svgLine
	// Links join a run that followed others (after:) to their runs.
	Links   []svgLink
	Empty   bool
	NowX    float64
	ShowNow bool
	LegendY float64
}

type svgTick struct {
	X     float64
	Label string
}

type svgBand struct {
	X, W      float64
	Class     string
	Label     string
	Epoch     uint64
	ShowLabel bool
}

type svgLane struct {
	Y     float64
	Label string
	Class string
}

type svgBar struct {
	X, W, Y      float64
	WaitX, WaitW float64
	Class        string
	Label        string
	Title        string
	Attempt      string
	Token        string
	ShowLabel    bool
	// LabelOutside puts the label after a bar too narrow to hold it;
	// LabelBefore before it, when only that side has room.
	LabelOutside, LabelBefore bool
}

type svgLine struct {
	X1, X2, Y float64
}

type svgMark struct {
	X, Y  float64
	Kind  string // refused, applied, established, conflict, expired
	Label string
	Title string
	// LabelLeft puts a refusal's label left of its cross, where the
	// right edge would clip it (a story that is still being told has
	// its newest refusal at the edge).
	LabelLeft bool
}

// layoutTimeline computes the picture.
func layoutTimeline(d timelineData) svgTimeline {
	tl := svgTimeline{Title: d.Title, Width: tlWidth, PlotX: tlPlotX, PlotW: tlWidth - tlPlotX - tlPlotRight}

	// The window: everything shown, padded, at least ten seconds.
	var from, to time.Time
	see := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if from.IsZero() || t.Before(from) {
			from = t
		}
		if to.IsZero() || t.After(to) {
			to = t
		}
	}
	open := false
	for _, r := range d.Runs {
		for _, a := range r.Attempts {
			see(a.GrantedAt)
			see(a.StartedAt)
			see(a.EndedAt)
			if !a.State.Terminal() {
				open = true
			}
		}
	}
	for _, k := range d.Decisions {
		see(k.Time)
	}
	if from.IsZero() {
		tl.Empty = true
		tl.Height = tlLanesTop + 40
		return tl
	}
	if open && d.Now.After(to) {
		to = d.Now
	}
	if span := to.Sub(from); span < 10*time.Second {
		from = from.Add(-(10*time.Second - span) / 2)
		to = from.Add(10 * time.Second)
	}
	pad := to.Sub(from) / 25
	from, to = from.Add(-pad), to.Add(pad)
	span := to.Sub(from)
	x := func(t time.Time) float64 {
		f := float64(t.Sub(from)) / float64(span)
		return tl.PlotX + tl.PlotW*min(max(f, 0), 1)
	}
	tl.From, tl.To = from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339)

	// Lanes: one per worker, in order of first grant; the store lane last.
	var workers []string
	laneOf := map[string]int{}
	workerOf := map[string]string{} // attempt id -> worker
	type placed struct {
		a   jobs.Attempt
		run jobs.Run
	}
	var attempts []placed
	// A chain (runs of several jobs: after:) gets a lane per job, so
	// that it reads top to bottom; otherwise each worker has one.
	multiJob := false
	for _, r := range d.Runs {
		multiJob = multiJob || r.Job != d.Runs[0].Job
	}
	laneKey := func(r jobs.Run, a jobs.Attempt) string {
		switch {
		case multiJob:
			return "job " + r.Job
		case a.Worker == "":
			return "(no worker)"
		}
		return a.Worker
	}
	for _, r := range d.Runs {
		for _, a := range r.Attempts {
			attempts = append(attempts, placed{a, r})
			workerOf[a.ID] = laneKey(r, a)
		}
	}
	slices.SortStableFunc(attempts, func(p, q placed) int { return p.a.GrantedAt.Compare(q.a.GrantedAt) })
	for _, p := range attempts {
		w := laneKey(p.run, p.a)
		if _, ok := laneOf[w]; !ok {
			laneOf[w] = len(workers)
			workers = append(workers, w)
		}
	}
	laneY := func(i int) float64 { return tlLanesTop + float64(i)*tlLaneH }
	for i, w := range workers {
		tl.Lanes = append(tl.Lanes, svgLane{Y: laneY(i), Label: w, Class: "worker"})
	}
	storeLane := -1
	if len(d.Decisions) > 0 {
		storeLane = len(workers)
		tl.Lanes = append(tl.Lanes, svgLane{Y: laneY(storeLane), Label: "fenced store", Class: "store"})
	}
	tl.PlotBottom = laneY(len(tl.Lanes))
	tl.LegendY = tl.PlotBottom + 26
	tl.Height = tl.LegendY + 22

	// Epoch bands from the elections, each until the next.
	var elections []jobs.Event
	expiredAt := map[string]time.Time{}
	for _, e := range d.Events {
		switch e.Kind {
		case jobs.EventElected:
			elections = append(elections, e)
		case jobs.EventExpired:
			expiredAt[e.Attempt] = e.Time
		}
	}
	slices.SortStableFunc(elections, func(a, b jobs.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	for i, e := range elections {
		end := to
		if i+1 < len(elections) {
			end = elections[i+1].Time
		}
		if !end.After(from) || !e.Time.Before(to) {
			continue
		}
		x1, x2 := x(e.Time), x(end)
		b := svgBand{X: x1, W: x2 - x1, Epoch: e.Epoch, Class: fmt.Sprintf("band band-%d", e.Epoch%2),
			Label: fmt.Sprintf("epoch %d · %s leads", e.Epoch, e.Node)}
		tl.Bands = append(tl.Bands, b)
		if e.Time.After(from) {
			tl.Elections = append(tl.Elections, svgTick{X: x1, Label: e.Node + " elected"})
		}
	}

	// Attempts.
	barEnd := map[string]float64{}
	for _, p := range attempts {
		a := p.a
		w := laneKey(p.run, a)
		y := laneY(laneOf[w]) + (tlLaneH-tlBarH)/2
		start := a.StartedAt
		if start.IsZero() {
			start = a.GrantedAt
		}
		end := a.EndedAt
		if end.IsZero() {
			end = start
			if !a.State.Terminal() && d.Now.After(start) {
				end = d.Now // an open attempt reaches now, not the padding after it
			}
		}
		bar := svgBar{
			WaitX: x(a.GrantedAt), WaitW: max(x(start)-x(a.GrantedAt), 0),
			X: x(start), Y: y, Class: "bar state-" + string(a.State),
			Attempt: a.ID, Token: a.Token.String(),
			Label: fmt.Sprintf("#%d · %s", a.Number, a.Token),
		}
		bar.W = max(x(end)-bar.X, 3)
		bar.Title = fmt.Sprintf("%s attempt %d on %s: %s\ntoken %s (epoch %d, seq %d)\ngranted %s",
			p.run.ID, a.Number, a.Worker, a.State, a.Token, a.Token.Epoch, a.Token.Seq, a.GrantedAt.UTC().Format("15:04:05.000"))
		if !a.StartedAt.IsZero() {
			bar.Title += ", started " + a.StartedAt.UTC().Format("15:04:05.000")
		}
		if !a.EndedAt.IsZero() {
			bar.Title += ", ended " + a.EndedAt.UTC().Format("15:04:05.000")
		}
		if a.StoreOutcome != "" {
			bar.Title += "\nstore: " + a.StoreOutcome
		}
		if a.Error != "" {
			bar.Title += "\n" + a.Error
		}
		tl.Bars = append(tl.Bars, bar)
		barEnd[a.ID] = bar.X + bar.W
		if t, ok := expiredAt[a.ID]; ok {
			tl.Marks = append(tl.Marks, svgMark{X: x(t), Y: laneY(laneOf[w]) + tlLaneH/2, Kind: "expired", Label: "lease expired",
				Title: fmt.Sprintf("the leader expired %s's lease at %s", a.ID, t.UTC().Format("15:04:05.000"))})
		}
	}

	tl.Links = chainLinks(d.Runs, tl.Bars)

	// Which labels show, and where: placeLabels, once all is laid out.

	// Store decisions.
	for _, k := range d.Decisions {
		title := fmt.Sprintf("%s on %s at %s\ntoken %s, greatest then %s, version %d", k.Outcome, k.Key,
			k.Time.UTC().Format("15:04:05.000"), k.Token, k.Greatest, k.Version)
		if k.Attempt != "" {
			title += "\nattempt " + k.Attempt
		}
		kind, label := string(k.Outcome), ""
		switch k.Outcome {
		case fencedstore.StaleOwner, fencedstore.Expired:
			kind, label = "refused", "refused "+k.Token.String()
			why := fmt.Sprintf("stale write refused: token %s is older than %s\n", k.Token, k.Greatest)
			if k.Token == k.Greatest { // on a key retention deleted
				why = fmt.Sprintf("stale write refused: token %s is not newer than the deleted key's tombstone\n", k.Token)
			}
			if k.Outcome == fencedstore.Expired {
				why = fmt.Sprintf("write refused: token %s expired at %s\n", k.Token, k.Expires.UTC().Format("15:04:05"))
			}
			title = why + title
			if w, ok := workerOf[k.Attempt]; ok {
				if w == "" {
					w = "(no worker)"
				}
				y := laneY(laneOf[w]) + tlLaneH/2
				tl.Marks = append(tl.Marks, svgMark{X: x(k.Time), Y: y, Kind: "refused", Label: label, Title: title})
				if end, ok := barEnd[k.Attempt]; ok && x(k.Time)-end > 12 {
					tl.Late = append(tl.Late, svgLine{X1: end, X2: x(k.Time) - 9, Y: y + 7})
				}
				label = "" // said on the worker's lane
			}
		case fencedstore.Applied:
			label = fmt.Sprintf("v%d", k.Version)
		}
		if storeLane >= 0 {
			tl.Marks = append(tl.Marks, svgMark{X: x(k.Time), Y: laneY(storeLane) + tlLaneH/2, Kind: kind, Label: label, Title: title})
		}
	}

	// The time axis.
	step := tickStep(span)
	for t := from.Truncate(step).Add(step); t.Before(to); t = t.Add(step) {
		label := t.UTC().Format("15:04:05")
		if step >= time.Minute {
			label = t.UTC().Format("15:04")
		}
		tl.Ticks = append(tl.Ticks, svgTick{X: x(t), Label: label})
	}
	if open || (!d.Now.Before(from) && !d.Now.After(to)) {
		tl.NowX, tl.ShowNow = x(d.Now), !d.Now.Before(from) && !d.Now.After(to)
	}
	tl.placeLabels()
	return tl
}

// tickStep picks a round interval giving about eight ticks.
func tickStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
	} {
		if span/s <= 10 {
			return s
		}
	}
	return 7 * 24 * time.Hour
}
