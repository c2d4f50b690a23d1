package pages

import (
	"time"

	"github.com/fencecron/fencecron/scheduler"
)

// ClockSkew is what this node knows of its peers' wall clocks
// (scheduler.SkewMonitor): every page warns of the peers flagged as
// beyond the threshold.
type ClockSkew interface {
	Over() []scheduler.PeerSkew
	Max() time.Duration
}

// skewWarning is the warning a page shows; empty when there is none.
type skewWarning struct {
	Peers []scheduler.PeerSkew
	Max   time.Duration
}

func (s *Dashboard) skewWarning() skewWarning {
	if s.ClockSkew == nil {
		return skewWarning{}
	}
	return skewWarning{Peers: s.ClockSkew.Over(), Max: s.ClockSkew.Max()}
}
