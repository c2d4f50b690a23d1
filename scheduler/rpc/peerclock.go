package rpc

import (
	"context"
	"net/http"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// TimeHeader carries the answering node's wall time (RFC 3339 with
// nanoseconds) on every answer of the internal API, so that each call
// compares two nodes' clocks at no extra cost (scheduler.SkewMonitor).
const TimeHeader = "Fencecron-Time"

// SkewObserver takes one exchange with a peer: sent and received by this
// node's clock, remote the peer's stamp (scheduler.SkewMonitor).
type SkewObserver interface {
	Observe(peer string, sent, received, remote time.Time)
}

// stampTime puts this node's wall time on an answer.
func (s *Server) stampTime(w http.ResponseWriter) {
	clock := s.Clock
	if clock == nil {
		clock = jobs.SystemClock{}
	}
	w.Header().Set(TimeHeader, clock.Now().UTC().Format(time.RFC3339Nano))
}

func (c *Client) clock() jobs.Clock {
	if c.Clock == nil {
		return jobs.SystemClock{}
	}
	return c.Clock
}

// observeTime hands Skew the answering node's stamp, if the answer has
// one and gossip names the node at addr.
func (c *Client) observeTime(addr string, sent time.Time, resp *http.Response) {
	if c.Skew == nil || c.NameAt == nil {
		return
	}
	received := c.clock().Now()
	v := resp.Header.Get(TimeHeader)
	if v == "" {
		return
	}
	remote, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return
	}
	if name := c.NameAt(addr); name != "" {
		c.Skew.Observe(name, sent, received, remote)
	}
}

// Probe asks node for its time, once: the answer is observed like any
// other (SkewMonitor.Probe).
func (c *Client) Probe(ctx context.Context, node string) error {
	addr, err := c.NodeHTTP(node)
	if err != nil {
		return err
	}
	return c.post(ctx, addr, pathTime, done{}, nil)
}
