package rpc

import (
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

type shiftedClock struct{ d time.Duration }

func (c shiftedClock) Now() time.Time                      { return time.Now().Add(c.d) }
func (c shiftedClock) NewTimer(d time.Duration) jobs.Timer { return jobs.SystemClock{}.NewTimer(d) }

type observed struct {
	mu      sync.Mutex
	peer    string
	offset  time.Duration
	rtt     time.Duration
	samples int
}

func (o *observed) Observe(peer string, sent, received, remote time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.peer, o.offset, o.rtt = peer, remote.Sub(sent.Add(received.Sub(sent)/2)), received.Sub(sent)
	o.samples++
}

// Every answer of the internal API carries the answering node's wall
// time; the caller's observer sees it, named as gossip names the address.
// A probe is such a call and nothing more.
func TestClient_ObservesThePeersClock(t *testing.T) {
	srv := &Server{Clock: shiftedClock{3 * time.Second}}
	addr := stub(t, srv)
	o := &observed{}
	c := &Client{Self: "n1", TLS: clientID, Skew: o,
		NameAt:   func(a string) string { return map[string]string{addr: "stub"}[a] },
		NodeHTTP: func(string) (string, error) { return addr, nil }}
	if err := c.Probe(t.Context(), "stub"); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	// The estimate is within half the round trip of the truth.
	if err := (o.offset - 3*time.Second).Abs(); o.samples != 1 || o.peer != "stub" || err > o.rtt/2+time.Millisecond {
		t.Errorf("observed %d samples, peer %q offset %s (rtt %s); want one of stub at +3s within half the round trip", o.samples, o.peer, o.offset, o.rtt)
	}
}
