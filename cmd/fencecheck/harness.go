package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// Config is one fencecheck run.
type Config struct {
	// Binary is the fencecron executable under test.
	Binary string
	// Dir holds configs, data directories, node logs and the report.
	Dir string
	// Duration is how long the nemesis runs.
	Duration time.Duration
	// Seed draws the fault schedule; the same seed replays it.
	Seed uint64
	// Servers vote; Workers only run jobs; a store node is always added.
	Servers, Workers int
	// Net is "auto" (namespaces when possible), "netns" or "loopback".
	Net string
	// Lease is the jobs' lease_ttl; pauses and partitions outlast it.
	Lease time.Duration
	// Poll is how often the collector reads the cluster.
	Poll time.Duration
	// Drain bounds the wait, after the last fault is healed, for every
	// run in the window to finish.
	Drain time.Duration
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

func (c *Config) defaults() {
	if c.Servers == 0 {
		c.Servers = 3
	}
	if c.Net == "" {
		c.Net = "auto"
	}
	if c.Lease == 0 {
		c.Lease = 2 * time.Second
	}
	if c.Poll == 0 {
		c.Poll = time.Second
	}
	if c.Drain == 0 {
		c.Drain = 90 * time.Second
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Harness runs one check: a cluster, its network, the nemesis and the
// collector.
type Harness struct {
	cfg      Config
	c        *localcluster.Cluster
	net      network
	store    *StoreProxy // workers to the store node
	forwards []*Proxy    // 127.0.0.1 to each node, in namespaces
	reader   *httpstore.Client
	obs      *Observation
	rng      *rand.Rand // the nemesis's choices at run time

	mu       sync.Mutex
	lives    map[string]int    // node -> how many times it was started
	pausedBy map[string]string // node -> who stopped it
	leader   string            // last leader seen
	stats    nemesisStats
	start    time.Time
	logMu    sync.Mutex
}

// New returns a harness for cfg.
func New(cfg Config) *Harness {
	cfg.defaults()
	return &Harness{
		cfg: cfg, obs: NewObservation(),
		rng:   rand.New(rand.NewPCG(cfg.Seed, 0x6e656d65736973)),
		lives: map[string]int{}, pausedBy: map[string]string{},
	}
}

func (h *Harness) logf(format string, args ...any) {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	el := time.Duration(0)
	if !h.start.IsZero() {
		el = time.Since(h.start).Truncate(100 * time.Millisecond)
	}
	fmt.Fprintf(h.cfg.Log, "[%7s] %s\n", el, fmt.Sprintf(format, args...))
}

// Run starts the cluster, waits for it to work, attacks it for the
// configured duration, heals it, waits for the runs to finish, reads the
// whole history and checks it. Only a failure to run at all is an error;
// violations are in the report.
func (h *Harness) Run(ctx context.Context) (*Report, error) {
	h.start = time.Now()
	defer h.teardown()
	if err := h.setup(); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	h.reader = httpstore.NewClient(h.c.Node("store").URL(), nil)
	if err := h.waitReady(ctx); err != nil {
		return nil, err
	}
	sched := Schedule(h.cfg.Seed, h.cfg.Duration, h.cfg.Lease, h.net.CanPartition())

	collectCtx, stopCollect := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { h.collect(collectCtx) })
	wg.Go(func() { h.watchSelfPauses(collectCtx) })

	h.logf("nemesis: %d faults over %s (seed %d)", len(sched), h.cfg.Duration, h.cfg.Seed)
	ops := h.runNemesis(ctx, sched)
	healed := time.Now()
	h.healAll()
	h.obs.Window.To = healed
	h.logf("healed everything; waiting for the runs to finish (up to %s)", h.cfg.Drain)
	drainErr := h.drain(ctx)
	stopCollect()
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// Freeze the store, so its listing, its histories and the proxy's
	// record of calls are read at one moment.
	h.store.Quiesce(time.Second)
	if err := h.finalRead(ctx); err != nil {
		return nil, fmt.Errorf("final read: %w", err)
	}
	h.obs.Calls = h.store.Operations()
	h.logf("read %d runs, %d events, %d keys; checking", len(h.obs.Runs), len(h.obs.Events), len(h.obs.Keys))
	checks := Check(h.obs, CheckOptions{VisualizeDir: h.cfg.Dir})
	rep := h.report(ops, checks, drainErr)
	return rep, nil
}

// waitReady waits until the servers agree on a leader and the job set is
// applied, and starts the window there.
func (h *Harness) waitReady(ctx context.Context) error {
	var a localcluster.Agreement
	err := until(ctx, 60*time.Second, func() error {
		var err error
		a, err = localcluster.Agreed(h.c.Servers())
		if err != nil {
			return err
		}
		st, err := h.c.Node(a.Leader).Status()
		if err != nil {
			return err
		}
		if st.Jobs.Count == 0 || st.Jobs.AppliedAt.IsZero() {
			return errors.New("no job set applied yet")
		}
		h.obs.Window.From = st.Jobs.AppliedAt
		return nil
	})
	if err != nil {
		return fmt.Errorf("the cluster never became ready: %w", err)
	}
	h.setLeader(a.Leader)
	// The job list, not the whole set's export: the export needs the API
	// token unless it is asked from the node's own host, and the nodes
	// live in network namespaces of their own. Four jobs fit one page.
	var list wire.JobList
	if err := h.c.Node(a.Leader).GetJSON("/api/v1/jobs", &list); err != nil {
		return err
	}
	if list.Next != "" {
		return fmt.Errorf("the job list of %d jobs does not fit one page", list.Total)
	}
	h.obs.Jobs = nil
	for _, j := range list.Jobs {
		h.obs.Jobs = append(h.obs.Jobs, j.Spec)
	}
	h.logf("leader %s, epoch %d; job set applied at %s", a.Leader, a.Epoch, h.obs.Window.From.Format(timeFmt))
	return nil
}

// until polls cond every 200ms until it returns nil, d passes (its last
// error), or ctx ends.
func until(ctx context.Context, d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			return fmt.Errorf("after %s: %w", d, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (h *Harness) setLeader(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leader = name
}
