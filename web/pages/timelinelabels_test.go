package pages

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// Every label the timeline shows fits in the picture and meets no other
// label or bar: the newest bar's at the right edge, the bands' and
// elections' at short epochs, and those of attempts that overlap on one
// worker's lane.
func TestLayoutTimeline_LabelsNeverClipOrOverlap(t *testing.T) {
	t0 := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	att := func(run string, n int, worker string, epoch, seq uint64, from, to time.Duration, st jobs.State) jobs.Attempt {
		a := jobs.Attempt{ID: fmt.Sprintf("%s.%d", run, n), Number: n, Worker: worker, Token: jobs.Fence{Epoch: epoch, Seq: seq}, State: st,
			GrantedAt: t0.Add(from), StartedAt: t0.Add(from)}
		if to > 0 {
			a.EndedAt = t0.Add(to)
		}
		return a
	}
	d := timelineData{
		Title: "labels",
		Now:   t0.Add(30 * time.Second),
		Runs: []jobs.Run{
			{ID: "r1", Attempts: []jobs.Attempt{att("r1", 1, "w1", 1234567, 1234567890, 0, 20*time.Second, jobs.Succeeded)}},
			{ID: "r2", Attempts: []jobs.Attempt{att("r2", 1, "w1", 1234567, 1234567899, time.Second, 18*time.Second, jobs.Succeeded)}},
			{ID: "r3", Attempts: []jobs.Attempt{att("r3", 1, "w1", 1234567, 1234567999, 2*time.Second, 3*time.Second, jobs.Failed)}},
			{ID: "r4", Attempts: []jobs.Attempt{att("r4", 1, "w1", 1234568, 1234568999, 29500*time.Millisecond, 0, jobs.Running)}},
			{ID: "r5", Attempts: []jobs.Attempt{att("r5", 1, "w2", 1234566, 1234567895, 4*time.Second, 14*time.Second, jobs.Succeeded)}},
		},
	}
	for i := range 6 {
		d.Events = append(d.Events, jobs.Event{Seq: uint64(i + 1), Kind: jobs.EventElected, Time: t0.Add(time.Duration(i) * 1500 * time.Millisecond),
			Epoch: 1234562 + uint64(i), Node: "a-node-with-a-long-name"})
	}
	tl := layoutTimeline(d)
	right := tl.Width
	type placed struct {
		what string
		s    span
	}
	check := func(group string, ls []placed) {
		for i, a := range ls {
			if a.s.from < 0 || a.s.to > right {
				t.Errorf("%s: %s (%.0f to %.0f) is clipped by the picture (0 to %.0f)", group, a.what, a.s.from, a.s.to, right)
			}
			for _, b := range ls[i+1:] {
				if a.s.meets(b.s) {
					t.Errorf("%s: %s (%.0f to %.0f) meets %s (%.0f to %.0f)", group, a.what, a.s.from, a.s.to, b.what, b.s.from, b.s.to)
				}
			}
		}
	}
	var bands, elections []placed
	shownBands := 0
	for _, b := range tl.Bands {
		if b.ShowLabel {
			shownBands++
			s := span{b.X + 5, b.X + 5 + textWidth(b.Label, 11)}
			if s.to > b.X+b.W {
				t.Errorf("band label %q runs out of its band", b.Label)
			}
			bands = append(bands, placed{b.Label, s})
		}
	}
	for _, e := range tl.Elections {
		if e.Label != "" {
			elections = append(elections, placed{e.Label, span{e.X + 3, e.X + 3 + textWidth(e.Label, 10)}})
		}
	}
	check("bands", bands)
	check("elections", elections)
	if shownBands == 0 || len(elections) == 0 {
		t.Errorf("%d band and %d election labels shown: the test shows nothing", shownBands, len(elections))
	}
	lanes := map[float64][]placed{}
	shown := 0
	for _, b := range tl.Bars {
		w := textWidth(b.Label, 11)
		var s span
		switch {
		case b.ShowLabel:
			s = span{b.X + 5, b.X + 5 + w}
		case b.LabelOutside:
			s = span{b.X + b.W + 4, b.X + b.W + 4 + w}
		case b.LabelBefore:
			s = span{b.WaitX - 4 - w, b.WaitX - 4}
		default:
			continue
		}
		shown++
		lanes[b.Y] = append(lanes[b.Y], placed{"label of " + b.Attempt, s})
		for _, o := range tl.Bars {
			if o.Attempt != b.Attempt && o.Y == b.Y && s.meets(span{o.WaitX, o.X + o.W}) {
				t.Errorf("label of %s meets the bar of %s", b.Attempt, o.Attempt)
			}
		}
	}
	for y, ls := range lanes {
		check(fmt.Sprintf("lane %.0f", y), ls)
	}
	if shown < 2 {
		t.Errorf("only %d bar labels shown", shown)
	}
	// The newest bar, at the right edge, keeps its label: before itself.
	for _, b := range tl.Bars {
		if b.Attempt == "r4.1" && !b.LabelBefore && !b.ShowLabel {
			t.Errorf("the newest bar (%s at %.0f, width %.0f) lost its label", b.Attempt, b.X, b.W)
		}
	}
}
