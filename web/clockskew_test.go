package web

import (
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/scheduler"
)

type fakeSkew []scheduler.PeerSkew

func (f fakeSkew) Over() []scheduler.PeerSkew { return f }
func (fakeSkew) Max() time.Duration           { return 500 * time.Millisecond }

// Every page warns of the peers whose clocks are off, and only then.
func TestServer_ClockSkewWarning(t *testing.T) {
	f := newFixture(t, func(s *Server) {
		s.ClockSkew = fakeSkew{{Peer: "n3", Offset: -2500 * time.Millisecond, Over: true}, {Peer: "<w9>", Offset: 4 * time.Second, Over: true}}
	})
	for _, path := range []string{"/", "/jobs", "/events"} {
		_, _, body := f.get(t, path)
		if !strings.Contains(body, `id="clock-skew"`) || !strings.Contains(body, "<b>n3</b>'s clock is 2.500s behind this node's") ||
			!strings.Contains(body, "<b>&lt;w9&gt;</b>'s clock is 4.000s ahead of this node's") || !strings.Contains(body, "cluster.max_clock_skew 500ms") {
			t.Errorf("%s lacks the warning:\n%s", path, body)
		}
	}
	plain := newFixture(t, func(s *Server) { s.ClockSkew = fakeSkew{} })
	if _, _, body := plain.get(t, "/"); strings.Contains(body, "clock-skew") {
		t.Errorf("a warning without skew")
	}
}
