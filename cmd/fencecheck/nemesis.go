package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// Fault kinds. Targets are roles (the leader, a worker that is running an
// attempt) resolved when the fault starts, so a seed replays the same
// sequence of faults and timings against whoever holds those roles then.
const (
	// Process faults.
	FaultPauseLeader  = "pause-leader"      // SIGSTOP the leader for longer than a lease
	FaultPauseWorker  = "pause-worker"      // SIGSTOP a node running an attempt, longer than its lease
	FaultKillLeader   = "kill-leader"       // SIGKILL the leader, restart it on its data
	FaultKillNode     = "kill-node"         // SIGKILL any job-running node, restart it
	FaultRestartAuth  = "restart-authority" // SIGKILL every server at once, restart them all
	FaultStoreRestart = "store-restart"     // SIGKILL the store node, restart it
	// A node holding a run granted ahead, hit between the grant and the
	// run's start (scheduler/fsm/prestart.go): SIGKILLed, or SIGSTOPped
	// across the fire time.
	FaultKillHolder  = "kill-holder"
	FaultPauseHolder = "pause-holder"
	// Store link faults (the proxy in front of the store).
	FaultStoreHold = "store-hold" // hold store calls, then deliver them in a random order
	FaultStoreDown = "store-down" // the store unreachable, calls in flight cut
	// Partitions (network namespaces only).
	FaultIsolateLeader = "partition-leader" // the leader cut from every node
	FaultCutWorker     = "partition-worker" // a running worker cut from the leader, not from the store
	FaultHalves        = "partition-halves" // servers and workers split in two random sides
)

type faultKind struct {
	name      string
	weight    int
	partition bool
	// dur draws the fault's length from the lease.
	dur func(r *rand.Rand, lease time.Duration) time.Duration
}

func between(lo, hi float64) func(*rand.Rand, time.Duration) time.Duration {
	return func(r *rand.Rand, lease time.Duration) time.Duration {
		return time.Duration((lo + (hi-lo)*r.Float64()) * float64(lease)).Round(10 * time.Millisecond)
	}
}

func seconds(lo, hi float64) func(*rand.Rand, time.Duration) time.Duration {
	return func(r *rand.Rand, _ time.Duration) time.Duration {
		return time.Duration((lo + (hi-lo)*r.Float64()) * float64(time.Second)).Round(10 * time.Millisecond)
	}
}

var faultKinds = []faultKind{
	{FaultPauseLeader, 3, false, between(1.5, 3)},
	{FaultPauseWorker, 4, false, between(1.5, 3)},
	{FaultKillLeader, 2, false, seconds(0.5, 3)},
	{FaultKillNode, 2, false, seconds(0.5, 3)},
	{FaultRestartAuth, 1, false, seconds(1, 4)},
	{FaultStoreRestart, 1, false, seconds(0.5, 2)},
	{FaultKillHolder, 2, false, seconds(0.5, 3)},
	// Longer than the short lease before the start, mostly shorter than
	// the whole lease: a holder that wakes within its lease_ttl must
	// still not start.
	{FaultPauseHolder, 2, false, between(0.5, 1.5)},
	{FaultStoreHold, 3, false, between(0.5, 2)},
	{FaultStoreDown, 1, false, between(0.5, 1.5)},
	{FaultIsolateLeader, 2, true, between(1.5, 3)},
	{FaultCutWorker, 3, true, between(1.5, 3)},
	{FaultHalves, 1, true, between(1.5, 3)},
}

// Op is one fault of the schedule and, once it ran, what it did.
type Op struct {
	// At is when it starts, after the nemesis began; For how long it
	// lasts (for a kill: how long the node stays down).
	At   time.Duration `json:"at_ns"`
	Kind string        `json:"kind"`
	For  time.Duration `json:"for_ns"`
	// Seed draws the op's own choices (which side of a split, which
	// worker), so they replay too.
	Seed uint64 `json:"seed"`

	Nodes []string  `json:"nodes,omitempty"`
	Began time.Time `json:"began,omitzero"`
	Ended time.Time `json:"ended,omitzero"`
	Note  string    `json:"note,omitempty"`
}

func (o Op) String() string {
	s := fmt.Sprintf("+%-7s %-17s %-6s", o.At.Truncate(100*time.Millisecond), o.Kind, o.For)
	if len(o.Nodes) > 0 {
		s += " " + strings.Join(o.Nodes, ",")
	}
	if o.Note != "" {
		s += " (" + o.Note + ")"
	}
	return s
}

// Schedule draws the faults of a run from seed: first every kind once in
// a shuffled order, so even a short run covers them all, then kinds by
// weight. Faults run one after another with a gap of 1 to 3 s, and all
// end before duration.
func Schedule(seed uint64, duration, lease time.Duration, partitions bool) []Op {
	r := rand.New(rand.NewPCG(seed, 0x7363686564756c65))
	var kinds []faultKind
	total := 0
	for _, k := range faultKinds {
		if k.partition && !partitions {
			continue
		}
		kinds = append(kinds, k)
		total += k.weight
	}
	first := slices.Clone(kinds)
	r.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	var ops []Op
	at := 2 * time.Second
	for i := 0; ; i++ {
		var k faultKind
		if i < len(first) {
			k = first[i]
		} else {
			n := r.IntN(total)
			for _, c := range kinds {
				if n -= c.weight; n < 0 {
					k = c
					break
				}
			}
		}
		op := Op{At: at, Kind: k.name, For: k.dur(r, lease), Seed: r.Uint64()}
		if op.At+op.For > duration {
			break
		}
		ops = append(ops, op)
		at += op.For + seconds(1, 3)(r, lease)
	}
	return ops
}

// nemesisStats counts what the nemesis did.
type nemesisStats struct {
	Pauses        int `json:"pauses"`
	SelfPauses    int `json:"self_pauses"`
	Kills         int `json:"kills"`
	Restarts      int `json:"restarts"`
	StoreRestarts int `json:"store_restarts"`
	Partitions    int `json:"partitions"`
	StoreHolds    int `json:"store_holds"`
	HeldCalls     int `json:"held_calls"`
	StoreDowns    int `json:"store_downs"`
	CutCalls      int `json:"cut_calls"`
	// HolderKills and HolderPauses count the holders of runs granted
	// ahead hit between the grant and the start.
	HolderKills  int `json:"holder_kills"`
	HolderPauses int `json:"holder_pauses"`
}

// runNemesis runs the schedule, each fault healed before the next.
func (h *Harness) runNemesis(ctx context.Context, sched []Op) []Op {
	begin := time.Now()
	var done []Op
	for _, op := range sched {
		select {
		case <-ctx.Done():
			return done
		case <-time.After(time.Until(begin.Add(op.At))):
		}
		op.Began = time.Now()
		h.apply(ctx, &op)
		op.Ended = time.Now()
		h.logf("fault %s", op)
		done = append(done, op)
	}
	return done
}

// waitForGrant polls a leader's trail until a new grant appears, and
// returns its attempt and token.
func waitForGrant(n *localcluster.Node, within time.Duration) (string, bool) {
	var page wire.EventList
	if err := getJSON(n, "/api/v1/events?limit=1", time.Second, &page); err != nil || len(page.Events) == 0 {
		return "", false
	}
	after := page.Events[len(page.Events)-1].Seq
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if err := getJSON(n, fmt.Sprintf("/api/v1/events?after=%d&limit=100", after), time.Second, &page); err != nil {
			return "", false
		}
		for _, e := range page.Events {
			if e.Kind == jobs.EventGranted {
				return e.Attempt + " " + tokenText(e.Token), true
			}
			after = e.Seq
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "", false
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// apply runs one fault for its duration and heals it.
func (h *Harness) apply(ctx context.Context, op *Op) {
	r := rand.New(rand.NewPCG(op.Seed, 1))
	switch op.Kind {
	case FaultPauseLeader, FaultPauseWorker:
		n := h.target(op.Kind, r)
		if n == nil {
			op.Note = "no target"
			return
		}
		op.Nodes = []string{n.Name}
		if err := h.pause(n, "nemesis"); err != nil {
			op.Note = err.Error()
			return
		}
		sleep(ctx, op.For)
		h.resume(n, "nemesis")
	case FaultKillLeader, FaultKillNode, FaultStoreRestart:
		n := h.target(op.Kind, r)
		if n == nil {
			op.Note = "no target"
			return
		}
		op.Nodes = []string{n.Name}
		if op.Kind == FaultKillLeader {
			// Kill it right after it commits a grant: before the grant
			// is dispatched or applied everywhere.
			if g, ok := waitForGrant(n, 3*time.Second); ok {
				op.Note = "just after granting " + g
			}
		}
		h.kill(n)
		sleep(ctx, op.For)
		if note := h.restart(n); note != "" {
			op.Note = note
		}
	case FaultKillHolder, FaultPauseHolder:
		run, n := h.holder()
		if n == nil {
			op.Note = "no run granted ahead"
			return
		}
		op.Nodes = []string{n.Name}
		// At a point the seed draws inside what is left of the window
		// between the grant and the start (the worker asks for its
		// start 25-100 ms before the fire time, worker/startlead.go).
		if window := time.Until(run.ScheduledAt) - holderMargin; window > 0 {
			sleep(ctx, time.Duration(r.Float64()*float64(window)))
		}
		op.Note = fmt.Sprintf("holding %s, %s before its fire time", run.Attempts[0].ID, time.Until(run.ScheduledAt).Round(time.Millisecond))
		if op.Kind == FaultKillHolder {
			h.count(func(s *nemesisStats) { s.HolderKills++ })
			h.kill(n)
			sleep(ctx, op.For)
			if note := h.restart(n); note != "" {
				op.Note += "; " + note
			}
			return
		}
		if err := h.pause(n, "nemesis"); err != nil {
			op.Note += "; " + err.Error()
			return
		}
		h.count(func(s *nemesisStats) { s.HolderPauses++ })
		sleep(ctx, op.For)
		h.resume(n, "nemesis")
	case FaultRestartAuth:
		servers := h.c.Servers()
		for _, n := range servers {
			op.Nodes = append(op.Nodes, n.Name)
			h.kill(n)
		}
		sleep(ctx, op.For)
		var notes []string
		for _, n := range servers {
			if note := h.restart(n); note != "" {
				notes = append(notes, note)
			}
		}
		op.Note = strings.Join(notes, "; ")
	case FaultStoreHold:
		h.store.SetMode(ProxyHold)
		h.count(func(s *nemesisStats) { s.StoreHolds++ })
		sleep(ctx, op.For)
		n := h.store.Release(r, 50*time.Millisecond)
		h.count(func(s *nemesisStats) { s.HeldCalls += n })
		op.Note = fmt.Sprintf("%d calls held, released in a random order", n)
	case FaultStoreDown:
		before := h.store.cutCount()
		h.store.SetMode(ProxyDown)
		h.count(func(s *nemesisStats) { s.StoreDowns++ })
		sleep(ctx, op.For)
		h.store.SetMode(ProxyPass)
		n := h.store.cutCount() - before
		h.count(func(s *nemesisStats) { s.CutCalls += n })
		op.Note = fmt.Sprintf("%d calls cut or refused", n)
	case FaultIsolateLeader, FaultCutWorker, FaultHalves:
		a, b := h.sides(op.Kind, r)
		if len(a) == 0 || len(b) == 0 {
			op.Note = "no target"
			return
		}
		op.Nodes = []string{strings.Join(a, "+") + "|" + strings.Join(b, "+")}
		var errs []string
		for _, x := range a {
			for _, y := range b {
				if err := h.net.Cut(x, y); err != nil {
					errs = append(errs, err.Error())
				}
			}
		}
		h.count(func(s *nemesisStats) { s.Partitions++ })
		sleep(ctx, op.For)
		if err := h.net.Mend(); err != nil {
			errs = append(errs, err.Error())
		}
		op.Note = strings.Join(errs, "; ")
	default:
		op.Note = "unknown fault"
	}
}

func (h *Harness) count(f func(*nemesisStats)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(&h.stats)
}

// jobNodes are the nodes that run jobs: servers and workers.
func (h *Harness) jobNodes() []*localcluster.Node {
	var out []*localcluster.Node
	for _, n := range h.c.Nodes {
		if !n.Store {
			out = append(out, n)
		}
	}
	return out
}

// currentLeader asks the live servers who leads; the one that says it
// does with the greatest epoch wins.
func (h *Harness) currentLeader() *localcluster.Node {
	var best *localcluster.Node
	var epoch uint64
	for _, n := range h.c.Live(h.c.Servers()) {
		st, err := getStatus(n, time.Second)
		if err == nil && st.RaftState == "Leader" && st.Epoch >= epoch {
			best, epoch = n, st.Epoch
		}
	}
	if best != nil {
		h.setLeader(best.Name)
	}
	return best
}

// runningWorker picks a live node other than the leader that is running
// an attempt now, or any live job node.
func (h *Harness) runningWorker(r *rand.Rand, leader *localcluster.Node) *localcluster.Node {
	var busy, idle []*localcluster.Node
	running := map[string]bool{}
	if leader != nil {
		if runs, err := getRuns(leader, 50, time.Second); err == nil {
			for _, run := range runs {
				if a, ok := run.Latest(); ok && a.State == jobs.Running {
					running[a.Worker] = true
				}
			}
		}
	}
	for _, n := range h.c.Live(h.jobNodes()) {
		if leader != nil && n.Name == leader.Name {
			continue
		}
		if running[n.Name] {
			busy = append(busy, n)
		} else {
			idle = append(idle, n)
		}
	}
	if len(busy) > 0 {
		return busy[r.IntN(len(busy))]
	}
	if len(idle) > 0 {
		return idle[r.IntN(len(idle))]
	}
	return nil
}

// holderMargin is how long before a fire time the holder faults aim no
// later than: a fault that lands after the holder asked for its start
// hits a started run, which other faults cover.
const holderMargin = 150 * time.Millisecond

// holder finds a run granted ahead (pending, one attempt, its fire time
// still more than holderMargin away) whose worker is a live node that no
// fault holds, waiting a little for one; nil if none came.
func (h *Harness) holder() (jobs.Run, *localcluster.Node) {
	var (
		run jobs.Run
		n   *localcluster.Node
	)
	leader := h.currentLeader()
	if leader == nil {
		return run, nil
	}
	localcluster.UntilEvery(3*time.Second, 20*time.Millisecond, func() error {
		runs, err := getRuns(leader, 50, time.Second)
		if err != nil {
			return err
		}
		for _, r := range runs {
			a, ok := r.Latest()
			if !ok || len(r.Attempts) != 1 || a.State != jobs.Pending || time.Until(r.ScheduledAt) <= holderMargin {
				continue
			}
			node := h.c.Node(a.Worker)
			h.mu.Lock()
			_, held := h.pausedBy[a.Worker]
			h.mu.Unlock()
			if node != nil && node.Running() && !held {
				run, n = r, node
				return nil
			}
		}
		return errNoTarget
	})
	return run, n
}

// target resolves a process fault's node, waiting a little for one
// (a leader may be being elected).
func (h *Harness) target(kind string, r *rand.Rand) *localcluster.Node {
	var n *localcluster.Node
	localcluster.Until(3*time.Second, func() error {
		if n = h.target1(kind, r); n == nil {
			return errNoTarget
		}
		return nil
	})
	return n
}

var errNoTarget = errors.New("no target")

func (h *Harness) target1(kind string, r *rand.Rand) *localcluster.Node {
	switch kind {
	case FaultPauseLeader, FaultKillLeader:
		return h.currentLeader()
	case FaultPauseWorker:
		return h.runningWorker(r, h.currentLeader())
	case FaultKillNode:
		live := h.c.Live(h.jobNodes())
		if len(live) == 0 {
			return nil
		}
		return live[r.IntN(len(live))]
	case FaultStoreRestart:
		return h.c.Node("store")
	}
	return nil
}

// sides resolves a partition's two sides, waiting a little for them.
func (h *Harness) sides(kind string, r *rand.Rand) (a, b []string) {
	localcluster.Until(3*time.Second, func() error {
		if a, b = h.sides1(kind, r); len(a) == 0 || len(b) == 0 {
			return errNoTarget
		}
		return nil
	})
	return a, b
}

func (h *Harness) sides1(kind string, r *rand.Rand) (a, b []string) {
	leader := h.currentLeader()
	switch kind {
	case FaultIsolateLeader:
		if leader == nil {
			return nil, nil
		}
		for _, n := range h.c.Nodes {
			if n != leader {
				b = append(b, n.Name)
			}
		}
		return []string{leader.Name}, b
	case FaultCutWorker:
		w := h.runningWorker(r, leader)
		if leader == nil || w == nil {
			return nil, nil
		}
		return []string{w.Name}, []string{leader.Name}
	case FaultHalves:
		nodes := h.jobNodes()
		r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		cut := 1 + r.IntN(len(nodes)-1)
		for i, n := range nodes {
			if i < cut {
				a = append(a, n.Name)
			} else {
				b = append(b, n.Name)
			}
		}
		slices.Sort(a)
		slices.Sort(b)
		return a, b
	}
	return nil, nil
}

// pause stops a node on behalf of who, unless it is stopped already.
func (h *Harness) pause(n *localcluster.Node, who string) error {
	h.mu.Lock()
	if by, ok := h.pausedBy[n.Name]; ok {
		h.mu.Unlock()
		return fmt.Errorf("%s is already stopped by %s", n.Name, by)
	}
	h.pausedBy[n.Name] = who
	h.stats.Pauses++
	h.mu.Unlock()
	return n.Pause()
}

// resume continues a node stopped by who.
func (h *Harness) resume(n *localcluster.Node, who string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pausedBy[n.Name] != who {
		return
	}
	delete(h.pausedBy, n.Name)
	n.Resume()
}

func (h *Harness) kill(n *localcluster.Node) {
	h.mu.Lock()
	delete(h.pausedBy, n.Name)
	h.stats.Kills++
	h.mu.Unlock()
	n.Kill()
}

// restart starts a killed node on its data directory; a new process is a
// new life for the epoch check.
func (h *Harness) restart(n *localcluster.Node) string {
	if n.Running() {
		return ""
	}
	h.mu.Lock()
	h.lives[n.Name]++
	h.stats.Restarts++
	if n.Store {
		h.stats.StoreRestarts++
	}
	h.mu.Unlock()
	if err := n.Start(); err != nil {
		return fmt.Sprintf("restart %s: %v", n.Name, err)
	}
	return ""
}

func (h *Harness) life(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lives[name]
}

// watchSelfPauses resumes the node that stops itself before publishing,
// after longer than a lease, so its late write meets the store.
func (h *Harness) watchSelfPauses(ctx context.Context) {
	n := h.c.Node(selfPausing)
	if n == nil {
		return
	}
	r := rand.New(rand.NewPCG(h.cfg.Seed, 0x73656c66))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			h.resume(n, "itself")
			return
		case <-tick.C:
		}
		h.mu.Lock()
		_, known := h.pausedBy[n.Name]
		h.mu.Unlock()
		if known || !n.Stopped() {
			continue
		}
		h.mu.Lock()
		h.pausedBy[n.Name] = "itself"
		h.stats.SelfPauses++
		h.mu.Unlock()
		hold := between(1.5, 2.5)(r, h.cfg.Lease)
		h.logf("%s stopped itself before publishing; resuming it in %s", n.Name, hold)
		sleep(ctx, hold)
		h.resume(n, "itself")
	}
}

// healAll ends every fault: nodes continued and started, links mended,
// the store proxy passing.
func (h *Harness) healAll() {
	h.store.SetMode(ProxyPass)
	if err := h.net.Mend(); err != nil {
		h.logf("mend: %v", err)
	}
	h.mu.Lock()
	for name := range h.pausedBy {
		delete(h.pausedBy, name)
	}
	h.mu.Unlock()
	for _, n := range h.c.Nodes {
		if n.Running() {
			n.Resume()
			continue
		}
		if note := h.restart(n); note != "" {
			h.logf("%s", note)
		}
	}
}
