package pages

import (
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// The runs of the report handoff (web's test fixture): a heartbeat that
// failed, and the report's run, whose attempt 1 (token 3.10, w1) was
// fenced and attempt 2 (4.15, w2) published.
var t0 = time.Date(2026, 8, 1, 9, 0, 0, 0, time.UTC)

const reportRun = "report@20260801T090000Z"

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func handoffRuns() []jobs.Run {
	return []jobs.Run{
		{ID: "heartbeat@20260801T085930Z", Job: "heartbeat", ScheduledAt: at(-30), State: jobs.Failed, Attempts: []jobs.Attempt{
			{ID: "heartbeat@20260801T085930Z.1", Number: 1, Token: jobs.Fence{Epoch: 3, Seq: 8}, Worker: "w2", State: jobs.Failed,
				GrantedAt: at(-30), StartedAt: at(-30), EndedAt: at(-29)},
		}},
		{ID: reportRun, Job: "report", ScheduledAt: t0, Output: "reports/2026-07.csv", State: jobs.Succeeded, Attempts: []jobs.Attempt{
			{ID: reportRun + ".1", Number: 1, Token: jobs.Fence{Epoch: 3, Seq: 10}, Worker: "w1", State: jobs.Fenced, GrantedAt: at(0), StartedAt: at(1), EndedAt: at(4),
				StoreOutcome: "stale_owner", Expired: true},
			{ID: reportRun + ".2", Number: 2, Token: jobs.Fence{Epoch: 4, Seq: 15}, Worker: "w2", State: jobs.Succeeded, GrantedAt: at(31), StartedAt: at(32), EndedAt: at(34),
				StoreOutcome: "applied", StoreVersion: 1},
		}},
	}
}

func TestLayoutTimeline_EmptyAndOpen(t *testing.T) {
	if tl := layoutTimeline(timelineData{Title: "x", Now: t0}); !tl.Empty {
		t.Error("no attempts and no decisions: want Empty")
	}
	// A running attempt stretches to now, and now is marked.
	d := timelineData{Now: at(100), Runs: handoffRuns()}
	d.Runs[0].Attempts[0].State, d.Runs[0].Attempts[0].EndedAt = "running", time.Time{}
	tl := layoutTimeline(d)
	if !tl.ShowNow || tl.To < at(100).UTC().Format(time.RFC3339) {
		t.Errorf("open attempt: ShowNow %v, window to %s; want now (%s) inside", tl.ShowNow, tl.To, at(100).UTC().Format(time.RFC3339))
	}
}

func TestTickStep(t *testing.T) {
	for _, tt := range []struct {
		span, want time.Duration
	}{{8 * time.Second, time.Second}, {50 * time.Second, 5 * time.Second}, {9 * time.Minute, time.Minute}, {100 * time.Hour, 12 * time.Hour}, {29 * time.Hour, 3 * time.Hour}} {
		if got := tickStep(tt.span); got != tt.want {
			t.Errorf("tickStep(%s) = %s, want %s", tt.span, got, tt.want)
		}
	}
}

// A bar too short for its token gets the label beside it, unless the
// next bar on its lane is too close.
func TestLayoutTimeline_NarrowBarLabels(t *testing.T) {
	run := handoffRuns()[1] // the report run: w1 long, w2 2s
	// Spread the window so w2's two-second bar is narrow, and add a
	// third attempt on w2 right after it.
	run.Attempts[0].EndedAt = at(600)
	third := run.Attempts[1]
	third.ID, third.Number, third.Token, third.GrantedAt, third.StartedAt, third.EndedAt = reportRun+".3", 3, jobs.Fence{Epoch: 4, Seq: 16}, at(35), at(35), at(36)
	run.Attempts = append(run.Attempts, third)
	tl := layoutTimeline(timelineData{Runs: []jobs.Run{run}, Now: at(700)})
	byToken := map[string]svgBar{}
	for _, b := range tl.Bars {
		byToken[b.Token] = b
	}
	if b := byToken["3.10"]; !b.ShowLabel {
		t.Errorf("the long bar has no label inside: %+v", b)
	}
	if b := byToken["4.15"]; b.ShowLabel || b.LabelOutside {
		t.Errorf("4.15 is followed closely by 4.16 and should have no label: %+v", b)
	}
	if b := byToken["4.16"]; b.ShowLabel || !b.LabelOutside {
		t.Errorf("4.16 is narrow with room after it: want its label outside: %+v", b)
	}
}

// An open attempt's bar ends at now, not at the window's padding beyond
// it.
func TestLayoutTimeline_OpenBarEndsAtNow(t *testing.T) {
	d := timelineData{Now: at(100), Runs: handoffRuns()}
	a := &d.Runs[1].Attempts[1]
	a.State, a.EndedAt = jobs.Pending, time.Time{}
	tl := layoutTimeline(d)
	for _, b := range tl.Bars {
		if b.Token == "4.15" && (b.X+b.W > tl.NowX+0.01 || b.X+b.W < tl.NowX-0.01) {
			t.Errorf("the pending bar ends at x=%.1f, now is at x=%.1f", b.X+b.W, tl.NowX)
		}
	}
}

// A refusal at the right edge has its label on the cross's left, where
// the picture does not clip it.
func TestLayoutTimeline_RefusalLabelAtTheEdge(t *testing.T) {
	tl := svgTimeline{Width: tlWidth, PlotX: tlPlotX, PlotW: tlWidth - tlPlotX - tlPlotRight}
	right := tl.PlotX + tl.PlotW
	tl.Marks = []svgMark{{X: right - 2, Kind: "refused", Label: "refused 2.7"}, {X: tl.PlotX + 40, Kind: "refused", Label: "refused 2.7"}}
	tl.placeLabels()
	if !tl.Marks[0].LabelLeft || tl.Marks[1].LabelLeft {
		t.Errorf("LabelLeft = %v, %v; want the one at the edge only", tl.Marks[0].LabelLeft, tl.Marks[1].LabelLeft)
	}
}
