package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// demo is one `fencecron demo`: its cluster and what it tells.
type demo struct {
	c     *localcluster.Cluster
	link  *storeLink
	out   io.Writer
	pause time.Duration
	dash  string
	start time.Time // of the current story; the story's goroutine only

	mu    sync.Mutex
	front *localcluster.Node // the server the dashboard proxy uses
}

// Bounds of the story's waits. Each is far above what the step takes on
// an idle machine: a step that does not happen within it is reported as
// such, and the demo stops.
const (
	demoReadyWait = 60 * time.Second
	demoStepWait  = 30 * time.Second
)

var demoClient = &http.Client{Timeout: 5 * time.Second}

// errGiveUp marks a wait's condition that can no longer become true.
var errGiveUp = errors.New("giving up")

// tell tells the story once, or every demoEvery with loop, until ctx
// ends. After a single story the cluster stays up for looking around.
func (d *demo) tell(ctx context.Context, loop bool) error {
	for n := 1; ; n++ {
		began := time.Now()
		if err := d.story(ctx, n); err != nil {
			return err
		}
		if !loop {
			fmt.Fprintf(d.out, "the cluster keeps running so you can look around at %s/ ; Ctrl-C stops it and every process it started.\n", d.dash)
			<-ctx.Done()
			return nil
		}
		next := began.Add(demoEvery)
		fmt.Fprintf(d.out, "next story at %s; Ctrl-C stops the demo.\n", next.Format("15:04:05"))
		if !sleepCtx(ctx, time.Until(next)) {
			return nil
		}
	}
}

// story is the paused-worker story, then a leader's death. Each chapter
// waits for what the previous one set going, so they run in order and
// the first that does not happen in time ends the story.
func (d *demo) story(ctx context.Context, n int) error {
	d.start = time.Now()
	fmt.Fprintf(d.out, "\nstory %d: a worker stalls while it holds the report (%s)\n", n, d.start.Format("15:04:05"))
	if err := d.occupyW2(ctx); err != nil {
		return err
	}
	// w1's publish will wait on the link, however soon it comes.
	d.link.hold()
	defer d.link.let()
	rep, err := d.stallW1(ctx)
	if err != nil {
		return err
	}
	if err := d.takeOver(ctx, rep); err != nil {
		return err
	}
	if err := d.refuseLate(ctx, rep); err != nil {
		return err
	}
	old, b, err := d.killLeader(ctx)
	if err != nil {
		return err
	}
	if err := d.rejoin(ctx, old, b); err != nil {
		return err
	}
	if err := d.publishInNewEpoch(ctx, rep.second); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "story %d done in %.0fs: the timeline at %s/timeline?job=report shows it, the key at %s/store/%s\n",
		n, time.Since(d.start).Seconds(), d.dash, d.dash, rep.key)
	return nil
}

// reportRun is what the story's chapters hand on to each other about the
// report: its run, its output key and the two attempts at it.
type reportRun struct {
	run    jobs.Run
	key    string
	first  jobs.Attempt // w1's, paused
	second jobs.Attempt // w2's, after w1's lease expired
	w1     *localcluster.Node
	paused time.Time
}

// occupyW2 waits for the cluster and gives w2 some other work first.
// Placement: the leader gives a run to the least loaded matching worker.
// There is no "prefer this worker"; a target that names w1 alone would
// also keep w2 from taking over.
func (d *demo) occupyW2(ctx context.Context) error {
	a, err := d.ready(ctx)
	if err != nil {
		return err
	}
	d.say("the cluster is ready: %s leads in epoch %d; w1, w2 and the store node are alive", a.Leader, a.Epoch)
	backup, err := d.trigger(ctx, "backup")
	if err != nil {
		return err
	}
	if w := backup.Attempts[0].Worker; w != "w2" {
		return fmt.Errorf("backup went to %s, not w2", w)
	}
	d.say("w2 runs the backup job (token %s): w2 has one attempt open, w1 none", backup.Attempts[0].Token)
	return nil
}

// stallW1 gives the report to w1 and stops w1 the moment its publish is
// in flight: the one moment a stale write can still reach the store.
func (d *demo) stallW1(ctx context.Context) (*reportRun, error) {
	run, err := d.trigger(ctx, "report")
	if err != nil {
		return nil, err
	}
	rep := &reportRun{run: run, first: run.Attempts[0], key: run.Output}
	if rep.first.Worker != "w1" {
		return nil, fmt.Errorf("the leader gave report to %s, not the less loaded w1 (run %s)", rep.first.Worker, run.ID)
	}
	d.say("w1 holds report with token %s (the least loaded worker); it will write %s", rep.first.Token, rep.key)

	// w1 shuts older tokens out at the store, runs the command, looks at
	// its lease once more and publishes.
	if _, err := d.waitDecision(ctx, rep.key, "w1 did not establish "+rep.first.Token.String()+" at the store", func(dec fencedstore.Decision) bool {
		return dec.Outcome == fencedstore.Established && dec.Token == fencedstore.Token(rep.first.Token)
	}); err != nil {
		return nil, err
	}
	d.say("w1 established %s at the store for %s: no older token can write it now; the report runs (%s)", rep.first.Token, rep.key, demoReportRuns)
	if err := d.waitHeld(ctx, rep.key, demoReportRuns+demoStepWait); err != nil {
		return nil, err
	}
	rep.w1 = d.c.Node("w1")
	pid := rep.w1.Pid()
	if err := rep.w1.PauseGroup(); err != nil {
		return nil, err
	}
	rep.paused = time.Now()
	d.say("w1 finished the report, found its lease held and sent its publish with %s; the link holds it in flight", rep.first.Token)
	d.say("w1 paused right after sending: SIGSTOP to its process group (pid %d), for at least %s; its lease is %s", pid, d.pause, demoLease)
	return rep, nil
}

// takeOver waits while the lease runs out: the leader expires it and, in
// the same Raft entry, grants the run to another worker with a newer
// token, which publishes.
func (d *demo) takeOver(ctx context.Context, rep *reportRun) error {
	var err error
	if rep.run, err = d.waitRun(ctx, rep.run.ID, "the leader did not expire w1's lease", func(r jobs.Run) error {
		if !r.Attempts[0].Expired {
			return fmt.Errorf("w1's attempt is %s, not expired", r.Attempts[0].State)
		}
		return nil
	}); err != nil {
		return err
	}
	d.say("lease expired (%s): the leader took report back from w1", strings.TrimPrefix(d.expiry(rep.first.ID), "lease expired: "))
	if rep.run, err = d.waitRun(ctx, rep.run.ID, "w2 was not granted report", func(r jobs.Run) error {
		if len(r.Attempts) < 2 {
			return errors.New("no second attempt")
		}
		return nil
	}); err != nil {
		return err
	}
	rep.second = rep.run.Attempts[1]
	if rep.second.Worker != "w2" {
		return fmt.Errorf("the takeover went to %s, not w2", rep.second.Worker)
	}
	d.say("w2 granted report with token %s, newer than w1's %s", rep.second.Token, rep.first.Token)
	applied, err := d.waitDecision(ctx, rep.key, "w2 did not publish "+rep.key, func(dec fencedstore.Decision) bool {
		return dec.Outcome == fencedstore.Applied && dec.Token == fencedstore.Token(rep.second.Token)
	})
	if err != nil {
		return err
	}
	d.say("w2 published v%d of %s with %s", applied.Version, rep.key, rep.second.Token)
	return nil
}

// refuseLate wakes w1: its command finished while it was stopped, so it
// goes straight on to publish what it computed, with its old token, and
// the store refuses it.
func (d *demo) refuseLate(ctx context.Context, rep *reportRun) error {
	if !sleepCtx(ctx, d.pause-time.Since(rep.paused)) {
		return ctx.Err()
	}
	d.link.let()
	if err := rep.w1.ResumeGroup(); err != nil {
		return err
	}
	d.say("w1 resumed (SIGCONT) after %.1fs, unaware of it; the link lets go and w1 sends its publish with %s again", time.Since(rep.paused).Seconds(), rep.first.Token)
	refused, err := d.waitDecision(ctx, rep.key, "w1's publish with "+rep.first.Token.String()+" did not reach the store", func(dec fencedstore.Decision) bool {
		return dec.Outcome == fencedstore.StaleOwner && dec.Token == fencedstore.Token(rep.first.Token)
	})
	if err != nil {
		if r, ok := d.findRun(rep.run.ID); ok {
			err = fmt.Errorf("%w (w1's attempt: %s, %s)", err, r.Attempts[0].State, r.Attempts[0].Error)
		}
		return err
	}
	body, err := d.body(rep.key)
	if err != nil {
		return err
	}
	d.say("w1 tried %s: refused (stale_owner), the store holds %s and keeps w2's v%d: %q", rep.first.Token, refused.Greatest, refused.Version, strings.TrimSpace(body))
	if rep.run, err = d.waitRun(ctx, rep.run.ID, "w1's attempt was not recorded as fenced", func(r jobs.Run) error {
		if a := r.Attempts[0]; a.State != jobs.Fenced {
			return fmt.Errorf("w1's attempt is %s", a.State)
		}
		return nil
	}); err != nil {
		return err
	}
	d.say("w1 reports the refusal: its attempt ends %s; the run is %s, by w2", rep.run.Attempts[0].State, rep.run.State)
	return nil
}

// killLeader kills the leader; the others elect a new one in a new
// epoch, which it returns with the killed node.
func (d *demo) killLeader(ctx context.Context) (*localcluster.Node, localcluster.Agreement, error) {
	a, err := d.ready(ctx)
	if err != nil {
		return nil, localcluster.Agreement{}, err
	}
	old := d.c.Node(a.Leader)
	old.Kill()
	d.say("%s, the leader of epoch %d, killed (SIGKILL)", old.Name, a.Epoch)
	var b localcluster.Agreement
	if err := d.wait(ctx, demoStepWait, "no new leader was elected", func() error {
		var err error
		if b, err = localcluster.Agreed(d.c.Live(d.c.Servers())); err == nil && b.Epoch <= a.Epoch {
			err = fmt.Errorf("still epoch %d", b.Epoch)
		}
		return err
	}); err != nil {
		return nil, localcluster.Agreement{}, err
	}
	d.say("%s elected leader: epoch %d", b.Leader, b.Epoch)
	return old, b, nil
}

// rejoin restarts the killed leader. It catches up from the others; it
// may also call an election of its own, so the leader is read again and
// compared with b, the one elected without it.
func (d *demo) rejoin(ctx context.Context, old *localcluster.Node, b localcluster.Agreement) error {
	if err := old.Start(); err != nil {
		return fmt.Errorf("restart %s: %w", old.Name, err)
	}
	var c localcluster.Agreement
	if err := d.wait(ctx, demoReadyWait, old.Name+" did not rejoin", func() error {
		var err error
		if c, err = localcluster.Agreed(d.c.Live(d.c.Servers())); err != nil {
			return err
		}
		if len(d.c.Live(d.c.Servers())) < 3 {
			return errors.New("not every server runs")
		}
		return nil
	}); err != nil {
		return err
	}
	if c.Epoch == b.Epoch {
		d.say("%s restarted on its data directory (pid %d): it follows %s", old.Name, old.Pid(), c.Leader)
	} else {
		d.say("%s restarted on its data directory (pid %d); another election followed: %s leads in epoch %d", old.Name, old.Pid(), c.Leader, c.Epoch)
	}
	return nil
}

// publishInNewEpoch runs the report once more, to show that any token of
// the new epoch outranks w2's from the old one.
func (d *demo) publishInNewEpoch(ctx context.Context, second jobs.Attempt) error {
	if _, err := d.ready(ctx); err != nil {
		return err
	}
	next, err := d.trigger(ctx, "report")
	if err != nil {
		return err
	}
	na := next.Attempts[0]
	d.say("report again, in epoch %d: %s granted %s", na.Token.Epoch, na.Worker, na.Token)
	pub, err := d.waitDecision(ctx, next.Output, na.Worker+" did not publish "+next.Output, func(dec fencedstore.Decision) bool {
		return dec.Outcome == fencedstore.Applied && dec.Token == fencedstore.Token(na.Token)
	})
	if err != nil {
		return err
	}
	d.say("%s published v%d of %s with %s: every token of epoch %d outranks %s", na.Worker, pub.Version, next.Output, na.Token, na.Token.Epoch, second.Token)
	return nil
}

// waitHeld waits until the link holds a publish of key.
func (d *demo) waitHeld(ctx context.Context, key string, within time.Duration) error {
	t := time.NewTimer(within)
	defer t.Stop()
	for {
		select {
		case k := <-d.link.arrived:
			if k == key {
				return nil
			}
		case <-t.C:
			return fmt.Errorf("w1 did not publish %s within %s", key, within)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// say narrates one step, with the time since the story began.
func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "  %5.1fs  %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// ready waits until the live servers agree on a leader whose gossip sees
// both workers and the store node alive, and returns the agreement.
func (d *demo) ready(ctx context.Context) (localcluster.Agreement, error) {
	var a localcluster.Agreement
	err := d.wait(ctx, demoReadyWait, "the cluster did not become ready", func() error {
		var err error
		if a, err = localcluster.Agreed(d.c.Live(d.c.Servers())); err != nil {
			return err
		}
		st, err := d.c.Node(a.Leader).Status()
		if err != nil {
			return err
		}
		for _, name := range []string{"w1", "w2", "store"} {
			if !memberAlive(st, name) {
				return fmt.Errorf("%s does not see %s alive yet", a.Leader, name)
			}
		}
		return nil
	})
	return a, err
}

func memberAlive(st wire.Status, name string) bool {
	for _, m := range st.Members {
		if m.Name == name && m.State == "alive" && m.Meta.HTTPAddr != "" {
			return true
		}
	}
	return false
}

// wait polls cond until it returns nil, returns an errGiveUp, ctx ends
// or within passes; then it says what did not happen in time.
func (d *demo) wait(ctx context.Context, within time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := cond()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errGiveUp):
			return fmt.Errorf("%s: %w", what, err)
		case time.Now().After(deadline):
			return fmt.Errorf("%s within %s: %v", what, within, err)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// api returns a server to ask: one whose process runs and is not stopped.
func (d *demo) api() *localcluster.Node {
	if live := d.c.Live(d.c.Servers()); len(live) > 0 {
		return live[0]
	}
	return d.c.Servers()[0]
}

// trigger starts a run of job now, through any server (a follower
// forwards to the leader), and returns it with its first attempt.
func (d *demo) trigger(ctx context.Context, job string) (jobs.Run, error) {
	var run jobs.Run
	err := d.wait(ctx, demoStepWait, "could not trigger "+job, func() error {
		if err := d.api().Post("/api/v1/jobs/"+job+"/trigger", nil, &run); err != nil {
			return err
		}
		if len(run.Attempts) == 0 {
			return fmt.Errorf("%w: run %s is %s with no attempt (%s)", errGiveUp, run.ID, run.State, run.Reason)
		}
		return nil
	})
	return run, err
}

// findRun returns a run as a live server has it.
func (d *demo) findRun(id string) (jobs.Run, bool) {
	job, _, _ := strings.Cut(id, "@")
	runs, err := d.api().Runs(url.QueryEscape(job), 50)
	if err != nil {
		return jobs.Run{}, false
	}
	for _, r := range runs {
		if r.ID == id {
			return r, true
		}
	}
	return jobs.Run{}, false
}

// waitRun polls a run until cond accepts it.
func (d *demo) waitRun(ctx context.Context, id, what string, cond func(jobs.Run) error) (jobs.Run, error) {
	var run jobs.Run
	err := d.wait(ctx, demoStepWait, what, func() error {
		r, ok := d.findRun(id)
		if !ok {
			return fmt.Errorf("run %s not found", id)
		}
		run = r
		return cond(r)
	})
	return run, err
}

// history returns the store's decisions on key.
func (d *demo) history(key string) ([]fencedstore.Decision, error) {
	var out struct{ Decisions []fencedstore.Decision }
	err := d.c.Node("store").GetJSON("/api/v1/history/"+key, &out)
	return out.Decisions, err
}

// waitDecision polls key's history until it holds a decision match
// accepts, and returns it.
func (d *demo) waitDecision(ctx context.Context, key, what string, match func(fencedstore.Decision) bool) (fencedstore.Decision, error) {
	var found fencedstore.Decision
	err := d.wait(ctx, demoStepWait, what, func() error {
		h, err := d.history(key)
		if err != nil {
			return err
		}
		for _, dec := range h {
			if match(dec) {
				found = dec
				return nil
			}
		}
		return fmt.Errorf("%d decisions on %s so far", len(h), key)
	})
	return found, err
}

// body returns key's current body from the store.
func (d *demo) body(key string) (string, error) {
	resp, err := demoClient.Get(d.c.Node("store").URL() + "/api/v1/store/" + key)
	if err != nil {
		return "", err
	}
	b, err := wire.ReadAnswer(resp)
	return string(b), err
}

// expiry describes the leader's expiry of attempt, from the audit trail.
func (d *demo) expiry(attempt string) string {
	var evs wire.EventList
	if err := d.api().GetJSON("/api/v1/events?kind="+jobs.EventExpired+"&limit=100", &evs); err == nil {
		for _, e := range evs.Events {
			if e.Attempt == attempt && e.Detail != "" {
				return e.Detail
			}
		}
	}
	return fmt.Sprintf("no renewal from w1 for %s", demoLease)
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
