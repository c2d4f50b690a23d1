package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencecron/fencecron/scheduler"
)

// ClockSkew is what the clock-skew figures read at scrape time
// (scheduler.SkewMonitor).
type ClockSkew interface {
	Peers() []scheduler.PeerSkew
	Max() time.Duration
}

var (
	skewDesc = prometheus.NewDesc("fencecron_clock_skew_seconds",
		"How far each peer's wall clock is ahead of this node's (negative: behind), from the internal API's answers; the error is at most half fencecron_clock_skew_rtt_seconds.",
		[]string{"peer"}, nil)
	skewRTTDesc = prometheus.NewDesc("fencecron_clock_skew_rtt_seconds",
		"Round trip of the exchange each peer's clock offset was estimated from.",
		[]string{"peer"}, nil)
	skewOverDesc = prometheus.NewDesc("fencecron_clock_skew_exceeded",
		"1 while a peer's clock is flagged as beyond cluster.max_clock_skew from this node's.",
		[]string{"peer"}, nil)
	skewMaxDesc = prometheus.NewDesc("fencecron_clock_skew_max_seconds",
		"This node's cluster.max_clock_skew.", nil, nil)
)

type skewCollector struct{ src ClockSkew }

func (c skewCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- skewDesc
	ch <- skewRTTDesc
	ch <- skewOverDesc
	ch <- skewMaxDesc
}

func (c skewCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(skewMaxDesc, prometheus.GaugeValue, c.src.Max().Seconds())
	for _, p := range c.src.Peers() {
		over := 0.0
		if p.Over {
			over = 1
		}
		ch <- prometheus.MustNewConstMetric(skewDesc, prometheus.GaugeValue, p.Offset.Seconds(), p.Peer)
		ch <- prometheus.MustNewConstMetric(skewRTTDesc, prometheus.GaugeValue, p.RTT.Seconds(), p.Peer)
		ch <- prometheus.MustNewConstMetric(skewOverDesc, prometheus.GaugeValue, over, p.Peer)
	}
}

// WatchClockSkew exports src's figures: fencecron_clock_skew_seconds{peer}
// and the round trip, flag and threshold beside it. Call it once.
func (n *Node) WatchClockSkew(src ClockSkew) error {
	return n.reg.Register(skewCollector{src})
}
