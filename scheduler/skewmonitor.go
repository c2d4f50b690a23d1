package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// Clock skew: no decision that keeps runs safe reads another node's wall
// clock (leases are durations measured on one node's monotonic clock;
// tokens order by the log), but a node whose clock is off shows and
// records confusing times: fire times, start and end times, token
// expiry. So nodes compare clocks whenever they talk: every answer of
// the internal API carries the answering node's wall time
// (scheduler/rpc), and the caller estimates the offset as
//
//	offset = remote - (sent + (received-sent)/2)
//
// (NTP's estimate with one remote stamp; its error is at most half the
// round trip). Of a peer's recent samples the one with the shortest round
// trip stands. Peers no call reached for a while are asked directly
// (SkewMonitor.Probe), so an idle cluster compares clocks too. A peer is
// flagged when its offset is beyond MaxSkew even at the edge of the error
// (|offset| - rtt/2 > MaxSkew), and unflagged once it is within
// MaxSkew*3/4 even at the other edge, so a clock near the threshold does
// not flap. Each flag and unflag is an audit entry (jobs.EventClockSkew),
// at most one per peer per skewEventEvery.

// DefaultMaxClockSkew is cluster.max_clock_skew's default.
const DefaultMaxClockSkew = 500 * time.Millisecond

// Rhythm and bounds of the comparison.
const (
	// skewSamples is how many recent samples of a peer are kept.
	skewSamples = 8
	// skewProbeEvery is how often a peer no call has measured is asked.
	skewProbeEvery = 10 * time.Second
	// skewForgetAfter drops a peer not measured for that long (gone).
	skewForgetAfter = 5 * time.Minute
	// skewEventEvery bounds the audit entries about one peer.
	skewEventEvery = time.Minute
	// skewEventQueue bounds the audit entries waiting to be sent.
	skewEventQueue = 16
)

// PeerSkew is what this node knows of one peer's wall clock.
type PeerSkew struct {
	Peer string `json:"peer"`
	// Offset is how far the peer's clock is ahead of this node's
	// (negative: behind), with an error of at most RTT/2.
	Offset time.Duration `json:"offset"`
	RTT    time.Duration `json:"rtt"`
	// Over is set while the peer is flagged as beyond MaxSkew.
	Over bool `json:"over"`
	// At is when the standing sample was taken (this node's clock).
	At time.Time `json:"at"`
}

type skewSample struct {
	offset, rtt time.Duration
	at          time.Time
}

type peerState struct {
	samples   []skewSample // newest last, at most skewSamples
	over      bool
	lastEvent time.Time // monotonic
}

// best is the sample with the shortest round trip.
func (p *peerState) best() skewSample {
	b := p.samples[0]
	for _, s := range p.samples[1:] {
		if s.rtt < b.rtt {
			b = s
		}
	}
	return b
}

// SkewMonitor compares this node's wall clock with its peers'. Set its
// fields, then Open and Close; Observe and Peers are safe for concurrent
// use, before Open too.
type SkewMonitor struct {
	// Self is this node's name.
	Self string
	// MaxSkew is the threshold (cluster.max_clock_skew); zero:
	// DefaultMaxClockSkew.
	MaxSkew time.Duration
	// Members lists the peers to compare with (alive, serving HTTP);
	// Probe asks one for its time (its answer is observed by the
	// transport). Either nil: no probing.
	Members func() []string
	Probe   func(ctx context.Context, peer string) error
	// Audit records an audit entry (Scheduler.Audit); nil: none.
	Audit func(ctx context.Context, kind, node, detail string) error
	// Clock is this node's clock, the one Observe's times come from;
	// nil: the system clock.
	Clock  jobs.Clock
	Logger *slog.Logger

	mu    sync.Mutex
	peers map[string]*peerState

	events chan string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (m *SkewMonitor) max() time.Duration {
	if m.MaxSkew <= 0 {
		return DefaultMaxClockSkew
	}
	return m.MaxSkew
}

func (m *SkewMonitor) clock() jobs.Clock {
	if m.Clock == nil {
		return jobs.SystemClock{}
	}
	return m.Clock
}

func (m *SkewMonitor) logger() *slog.Logger {
	if m.Logger == nil {
		return slog.Default()
	}
	return m.Logger
}

// Open starts probing and the sender of audit entries.
func (m *SkewMonitor) Open() error {
	ctx, cancel := context.WithCancel(context.Background())
	m.mu.Lock()
	m.events = make(chan string, skewEventQueue)
	m.mu.Unlock()
	m.cancel = cancel
	m.wg.Add(2)
	go m.probeLoop(ctx)
	go m.sendLoop(ctx)
	return nil
}

// Close stops both and waits for them.
func (m *SkewMonitor) Close(context.Context) error {
	if m.cancel != nil {
		m.cancel()
		m.wg.Wait()
	}
	return nil
}

// Observe takes one exchange with peer: this node sent at sent and had
// the answer at received (both from its own clock, with a monotonic
// reading), and the peer stamped it remote.
func (m *SkewMonitor) Observe(peer string, sent, received, remote time.Time) {
	if peer == "" || peer == m.Self || remote.IsZero() {
		return
	}
	rtt := received.Sub(sent)
	if rtt < 0 {
		return
	}
	offset := remote.Sub(sent.Add(rtt / 2))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.peers == nil {
		m.peers = map[string]*peerState{}
	}
	p := m.peers[peer]
	if p == nil {
		p = &peerState{}
		m.peers[peer] = p
	}
	p.samples = append(p.samples, skewSample{offset: offset, rtt: rtt, at: received})
	if len(p.samples) > skewSamples {
		p.samples = slices.Delete(p.samples, 0, len(p.samples)-skewSamples)
	}
	b := p.best()
	abs := b.offset.Abs()
	switch {
	case !p.over && abs-b.rtt/2 > m.max():
		p.over = true
		m.logger().Warn("clock skew: a peer's wall clock differs from this node's beyond cluster.max_clock_skew",
			"peer", peer, "offset", b.offset, "rtt", b.rtt, "max", m.max())
		m.event(p, received, fmt.Sprintf("%s's clock is %s %s %s's (±%s; cluster.max_clock_skew %s)",
			peer, fmtSkew(abs), aheadOrBehind(b.offset), m.Self, fmtSkew(b.rtt/2), m.max()))
	case p.over && abs+b.rtt/2 < m.max()*3/4:
		p.over = false
		m.logger().Info("clock skew: a peer's wall clock is back within cluster.max_clock_skew", "peer", peer, "offset", b.offset)
		m.event(p, received, fmt.Sprintf("%s's clock is back within %s of %s's (now %s %s)",
			peer, m.max(), m.Self, fmtSkew(abs), aheadOrBehind(b.offset)))
	}
}

// event queues an audit entry about p, unless one went out lately or the
// queue is full. Called with m.mu held.
func (m *SkewMonitor) event(p *peerState, now time.Time, detail string) {
	if !p.lastEvent.IsZero() && now.Sub(p.lastEvent) < skewEventEvery {
		return
	}
	p.lastEvent = now
	select {
	case m.events <- detail:
	default:
	}
}

func aheadOrBehind(d time.Duration) string {
	if d < 0 {
		return "behind"
	}
	return "ahead of"
}

// fmtSkew writes d in seconds with millisecond precision.
func fmtSkew(d time.Duration) string {
	return fmt.Sprintf("%.3fs", math.Abs(d.Seconds()))
}

// Peers returns what is known of each peer measured lately, by name.
func (m *SkewMonitor) Peers() []PeerSkew {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]PeerSkew, 0, len(m.peers))
	for name, p := range m.peers {
		b := p.best()
		out = append(out, PeerSkew{Peer: name, Offset: b.offset, RTT: b.rtt, Over: p.over, At: b.at})
	}
	slices.SortFunc(out, func(a, b PeerSkew) int {
		switch {
		case a.Peer < b.Peer:
			return -1
		case a.Peer > b.Peer:
			return 1
		}
		return 0
	})
	return out
}

// Over returns the peers flagged as beyond MaxSkew.
func (m *SkewMonitor) Over() []PeerSkew {
	return slices.DeleteFunc(m.Peers(), func(p PeerSkew) bool { return !p.Over })
}

// Max returns the threshold in force.
func (m *SkewMonitor) Max() time.Duration { return m.max() }

// stale returns the peers whose newest sample is older than d, and drops
// those not measured for skewForgetAfter.
func (m *SkewMonitor) stale(now time.Time, d time.Duration) map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]bool{}
	for name, p := range m.peers {
		age := now.Sub(p.samples[len(p.samples)-1].at)
		if age > skewForgetAfter {
			delete(m.peers, name)
			continue
		}
		if age >= d {
			out[name] = true
		}
	}
	return out
}

// probeLoop asks, every skewProbeEvery, each member that nothing measured
// since the last round for its time.
func (m *SkewMonitor) probeLoop(ctx context.Context) {
	defer m.wg.Done()
	if m.Members == nil || m.Probe == nil {
		return
	}
	t := time.NewTicker(skewProbeEvery)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		stale := m.stale(m.clock().Now(), skewProbeEvery)
		m.mu.Lock()
		known := map[string]bool{}
		for name := range m.peers {
			known[name] = true
		}
		m.mu.Unlock()
		for _, peer := range m.Members() {
			if peer == m.Self || (known[peer] && !stale[peer]) {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			if err := m.Probe(pctx, peer); err != nil && ctx.Err() == nil {
				m.logger().Debug("clock skew: could not ask a peer for its time", "peer", peer, "err", err)
			}
			cancel()
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// sendLoop records the queued audit entries through the leader.
func (m *SkewMonitor) sendLoop(ctx context.Context) {
	defer m.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case detail := <-m.events:
			if m.Audit == nil {
				continue
			}
			m.record(ctx, detail)
		}
	}
}

// skewAuditTries bounds the tries of one audit entry (a leader may be
// being elected).
const skewAuditTries = 3

// record sends one audit entry, trying again a little later if the
// leader could not be reached.
func (m *SkewMonitor) record(ctx context.Context, detail string) {
	backoff := 2 * time.Second
	for try := 1; ; try++ {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := m.Audit(actx, jobs.EventClockSkew, m.Self, detail)
		cancel()
		switch {
		case err == nil || ctx.Err() != nil:
			return
		case try == skewAuditTries:
			m.logger().Warn("clock skew: could not record the audit entry", "err", err, "detail", detail, "tries", try)
			return
		}
		if !jobs.Sleep(ctx, m.clock(), backoff) {
			return
		}
		backoff *= 2
	}
}
