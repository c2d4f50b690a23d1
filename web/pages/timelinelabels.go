package pages

import (
	"strconv"
	"unicode/utf8"
)

// Label placement on the timeline: every label is given the room its text
// needs (an estimate from its length and font size: the SVG is rendered
// by the browser, which alone knows the font) and is left out, its bar's
// or band's tooltip still saying it, where it would be clipped by the
// plot's right edge or run into another label: a bar's, the band next
// door's, another election's.

// textWidth estimates the width of s set at size px in the timeline's
// sans-serif font: about 0.62 em per character, generous for digits.
func textWidth(s string, px float64) float64 {
	return float64(utf8.RuneCountInString(s)) * px * 0.62
}

// span is a horizontal interval [from, to).
type span struct{ from, to float64 }

func (s span) meets(o span) bool { return s.from < o.to && o.from < s.to }

// placeLabels decides which labels the timeline shows, and where.
func (tl *svgTimeline) placeLabels() {
	right := tl.PlotX + tl.PlotW + tlPlotRight - 2 // the SVG's own edge

	// Epoch bands: the long label if it fits in the band, else the short
	// one, else none.
	for i := range tl.Bands {
		b := &tl.Bands[i]
		if b.Label == "" {
			continue
		}
		short := "epoch " + strconv.FormatUint(b.Epoch, 10)
		switch {
		case textWidth(b.Label, 11)+10 <= b.W:
			b.ShowLabel = true
		case textWidth(short, 11)+10 <= b.W:
			b.Label, b.ShowLabel = short, true
		default:
			b.ShowLabel = false
		}
	}

	// Refusals' labels (12px right of the cross, 11px bold) go left of
	// it where the edge would clip them.
	for i := range tl.Marks {
		m := &tl.Marks[i]
		m.LabelLeft = m.Kind == "refused" && m.Label != "" && m.X+12+textWidth(m.Label, 11) > right
	}

	// Elections: a label that would run into the one before it, or past
	// the edge, is left out (the dashed line stays).
	lastEnd := -1.0
	for i := range tl.Elections {
		e := &tl.Elections[i]
		w := textWidth(e.Label, 10)
		if e.X+3 < lastEnd+4 || e.X+3+w > right {
			e.Label = ""
			continue
		}
		lastEnd = e.X + 3 + w
	}

	// Bars, newest first (the one a reader looks for): inside if it fits;
	// else after the bar, or before it, where the lane has room: no other
	// bar and no label already placed there.
	taken := map[float64][]span{} // lane (bar Y) -> label spans placed
	bars := map[float64][]span{}  // lane -> bar spans (wait included)
	for _, b := range tl.Bars {
		bars[b.Y] = append(bars[b.Y], span{b.WaitX, b.X + b.W})
	}
	free := func(y float64, s span, self int) bool {
		if s.from < tl.PlotX || s.to > right {
			return false
		}
		for _, o := range taken[y] {
			if o.meets(s) {
				return false
			}
		}
		for j, o := range bars[y] {
			if j != self && o.meets(s) {
				return false
			}
		}
		return true
	}
	for i := len(tl.Bars) - 1; i >= 0; i-- {
		b := &tl.Bars[i]
		b.ShowLabel, b.LabelOutside, b.LabelBefore = false, false, false
		w := textWidth(b.Label, 11)
		// bars[b.Y] lists this lane's bars in the order of tl.Bars.
		self := 0
		for j := range i {
			if tl.Bars[j].Y == b.Y {
				self++
			}
		}
		inside := span{b.X + 5, b.X + 5 + w}
		after := span{b.X + b.W + 4, b.X + b.W + 4 + w}
		before := span{b.WaitX - 4 - w, b.WaitX - 4}
		switch {
		case w+10 <= b.W && free(b.Y, inside, self):
			b.ShowLabel = true
			taken[b.Y] = append(taken[b.Y], inside)
		case free(b.Y, after, self):
			b.LabelOutside = true
			taken[b.Y] = append(taken[b.Y], after)
		case free(b.Y, before, self):
			b.LabelBefore = true
			taken[b.Y] = append(taken[b.Y], before)
		}
	}
}
