package web

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/fencedstore"
)

func num(t testing.TB, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return v
}

// translate reads "translate(x,y)".
func translate(t testing.TB, s string) (float64, float64) {
	t.Helper()
	s = strings.TrimSuffix(strings.TrimPrefix(s, "translate("), ")")
	xs, ys, _ := strings.Cut(s, ",")
	return num(t, xs), num(t, ys)
}

// The report handoff reads at a glance: two epochs as bands, w1's
// attempt (3.10) and w2's (4.15) on their own lanes, w1's lease expiry,
// the publish by 4.15, and after it w1's stale write refused on w1's lane.
func TestServer_TimelineHandoff(t *testing.T) {
	f := newFixture(t)
	code, _, body := f.get(t, "/timeline.svg?job=report&runs=8")
	if code != http.StatusOK {
		t.Fatalf("GET /timeline.svg = %d\n%s", code, body)
	}
	svg := parseSVG(t, body)

	bands := svg.find("rect", "band")
	if len(bands) != 2 || bands[0].attr("data-epoch") != "3" || bands[1].attr("data-epoch") != "4" {
		t.Fatalf("bands = %+v, want epochs 3 then 4", bands)
	}
	b3x, b4x := num(t, bands[0].attr("x")), num(t, bands[1].attr("x"))
	if !(b3x < b4x) {
		t.Errorf("epoch 4 band starts at %v, not after epoch 3's %v", b4x, b3x)
	}
	if got := svg.find("text", "band-label"); len(got) != 2 || !strings.Contains(got[1].Text, "epoch 4 · n2 leads") {
		t.Errorf("band labels = %+v", got)
	}

	laneY := map[string]float64{}
	for _, l := range svg.find("g", "lane") {
		text := l.find("text", "lane-label")[0]
		laneY[l.attr("data-lane")] = num(t, text.attr("y")) - 25
	}
	if len(laneY) != 3 || laneY["w1"] >= laneY["w2"] || laneY["w2"] >= laneY["fenced store"] {
		t.Fatalf("lanes = %v, want w1, w2, then the store", laneY)
	}

	bars := map[string]svgNode{}
	for _, g := range svg.find("g", "attempt") {
		bars[g.attr("data-token")] = g
	}
	barOf := func(tok string) (x, y, w float64, class string) {
		g, ok := bars[tok]
		if !ok {
			t.Fatalf("no bar for token %s (have %v)", tok, bars)
		}
		r := g.find("rect", "bar")[0]
		return num(t, r.attr("x")), num(t, r.attr("y")), num(t, r.attr("width")), r.attr("class")
	}
	x1, y1, w1, c1 := barOf("3.10")
	x2, y2, w2, c2 := barOf("4.15")
	if y1 < laneY["w1"] || y1 >= laneY["w2"] || y2 < laneY["w2"] || y2 >= laneY["fenced store"] {
		t.Errorf("bars on the wrong lanes: 3.10 at y=%v, 4.15 at y=%v, lanes %v", y1, y2, laneY)
	}
	if c1 != "bar state-fenced" || c2 != "bar state-succeeded" {
		t.Errorf("bar classes = %q, %q", c1, c2)
	}
	if !(x1 < b4x && x2 > b4x) {
		t.Errorf("3.10 should start in epoch 3 (x=%v) and 4.15 in epoch 4 (x=%v), band 4 at %v", x1, x2, b4x)
	}
	if !strings.Contains(bars["4.15"].find("title", "")[0].Text, "token 4.15 (epoch 4, seq 15)") {
		t.Errorf("4.15's tooltip lacks its token: %q", bars["4.15"].find("title", "")[0].Text)
	}

	marks := svg.find("g", "mark")
	var refusedOnW1, refusedOnStore, applied, expired []float64
	for _, m := range marks {
		x, y := translate(t, m.attr("transform"))
		switch {
		case hasClass(m.attr("class"), "mark-refused") && y > laneY["w1"] && y < laneY["w2"]:
			refusedOnW1 = append(refusedOnW1, x)
		case hasClass(m.attr("class"), "mark-refused") && y > laneY["fenced store"]:
			refusedOnStore = append(refusedOnStore, x)
		case hasClass(m.attr("class"), "mark-applied"):
			applied = append(applied, x)
		case hasClass(m.attr("class"), "mark-expired") && y > laneY["w1"] && y < laneY["w2"]:
			expired = append(expired, x)
		}
	}
	if len(refusedOnW1) != 1 || len(refusedOnStore) != 1 || len(applied) != 1 || len(expired) != 1 {
		t.Fatalf("marks: refused on w1 %v, on the store %v, applied %v, expired on w1 %v; want one each", refusedOnW1, refusedOnStore, applied, expired)
	}
	if !(expired[0] <= x2 && applied[0] < refusedOnW1[0] && refusedOnW1[0] == refusedOnStore[0]) {
		t.Errorf("order wrong: expiry %v, takeover bar %v, applied %v, refused %v", expired[0], x2, applied[0], refusedOnW1[0])
	}
	// w1 stalled between its process's end and its refused write: a
	// dashed line on its lane joins them.
	late := svg.find("line", "late")
	if len(late) != 1 {
		t.Fatalf("%d stall lines, want 1", len(late))
	}
	if lx1, lx2, ly := num(t, late[0].attr("x1")), num(t, late[0].attr("x2")), num(t, late[0].attr("y1")); lx1 != x1+w1 || lx2 >= refusedOnW1[0] || lx2 < refusedOnW1[0]-10 || ly < laneY["w1"] || ly > laneY["w2"] {
		t.Errorf("stall line %v→%v at y=%v; want from w1's bar end %v to the cross at %v on w1's lane", lx1, lx2, ly, x1+w1, refusedOnW1[0])
	}
	_ = w2
}

// expiredStore is the fixture's store with one more decision on the
// report's key: a write refused because its token had expired.
type expiredStore struct{ fakeStore }

func (s expiredStore) History(ctx context.Context, key string) ([]fencedstore.Decision, error) {
	h, err := s.fakeStore.History(ctx, key)
	return append(h, fencedstore.Decision{Outcome: fencedstore.Expired, Token: fencedstore.Token{Epoch: 3, Seq: 10},
		Attempt: reportRun + ".1", Time: at(50), Greatest: fencedstore.Token{Epoch: 4, Seq: 15}, Version: 1, Expires: at(48)}), err
}

// A write refused for an expired token is drawn as a refusal, like a
// stale one, and says why.
func TestServer_KeyTimelineExpiredIsARefusal(t *testing.T) {
	f := newFixture(t, func(s *Server) { s.Store = expiredStore{} })
	code, _, body := f.get(t, "/timeline.svg?key="+reportKey)
	if code != http.StatusOK {
		t.Fatalf("GET /timeline.svg = %d\n%s", code, body)
	}
	marks := parseSVG(t, body).find("g", "mark-refused")
	var expired []svgNode
	for _, m := range marks {
		if ts := m.find("title", ""); len(ts) > 0 && strings.Contains(ts[0].Text, "expired at") {
			expired = append(expired, m)
		}
	}
	if len(expired) == 0 {
		t.Fatalf("no refusal mark for the expired write among %+v", marks)
	}
}
