package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
)

// failoverJobs are 20 jobs due every second, each at its own
// deterministic jitter within the second, so some fire time is always due
// within about 50 ms of any instant: the first grant measures the
// failover, not the phase of the schedule. Their lease_ttl is 5 s, as
// the issue that set the goals measured with (the short lease before a
// start is then 1 s).
const (
	failoverPulses = 20
	failoverJitter = 950 * time.Millisecond
)

func failoverJobs() string {
	var b strings.Builder
	for i := range failoverPulses {
		fmt.Fprintf(&b, "  - name: pulse%02d\n    schedule: \"* * * * * *\"\n    jitter: %s\n    command: [\"/bin/true\"]\n    overlap: allow\n    timeout: 10s\n    lease_ttl: 5s\n", i, failoverJitter)
	}
	return b.String()
}

// tickWindow is how long after the stop the ticks are counted: those the
// stopped leader held, and the others.
const tickWindow = 3 * time.Second

func runFailover(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, c := benchFlags("failover", stderr)
	rounds := fs.Int("rounds", 20, "how many times to stop the leader")
	profile := fs.String("profile", "default", "timeout profile: default or fast")
	signal := fs.String("signal", "kill", "how the leader is stopped: kill (SIGKILL, a crash), stop (SIGSTOP, a hung leader, or a host gone silent; killed after the round) or term (SIGTERM, a planned stop that hands leadership over)")
	bin, dir, cleanup, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	defer cleanup()
	sig, ok := map[string]syscall.Signal{"kill": syscall.SIGKILL, "stop": syscall.SIGSTOP, "term": syscall.SIGTERM}[*signal]
	if !ok {
		return fmt.Errorf("-signal %q: want kill, stop or term", *signal)
	}
	type result struct {
		label string
		failoverRounds
	}
	var results []result
	bins, labels := c.binaries(bin)
	for i, b := range bins {
		label := labels[i]
		fmt.Fprintf(stderr, "measuring %s\n", label)
		fr, err := measureFailover(ctx, b, filepath.Join(dir, fmt.Sprint(i)), *profile, sig, *rounds, stderr)
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		results = append(results, result{label, fr})
	}
	fmt.Fprintf(stdout, "failover, profile %s, %d leader stops per binary (3 servers, %s of the leader):\n", *profile, *rounds, sigName(sig))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "binary\tfrom %s to\tn\tmin\tmedian\tp99\tmax\t\n", sigName(sig))
	for _, r := range results {
		for _, row := range []struct {
			name string
			d    []time.Duration
		}{
			{"new epoch committed", r.elected}, {"first committed grant", r.granted},
			{"start of a tick the stopped leader held (late by)", r.held}, {"start of a tick it did not hold (late by)", r.other},
		} {
			s := summarize(row.d)
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t\n", r.label, row.name, s.N, ms(s.Min), ms(s.P50), ms(s.P99), ms(s.Max))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		fmt.Fprintf(stdout, "%s: of the ticks due within %s of each stop, %d held by the stopped leader (%d of them never started), %d not (%d never started); %d started twice\n",
			r.label, tickWindow, len(r.held)+r.heldNotRun, r.heldNotRun, len(r.other)+r.otherNotRun, r.otherNotRun, r.twice)
	}
	fmt.Fprintln(stdout, "ticks: runs of the 20 jobs (every second, jitter 950ms, lease_ttl 5s) due within the window after a stop; late by: the start of the attempt that ran, after the run's fire time (its scheduled time plus its jitter); held: its first attempt was granted to the stopped leader before the stop")
	return nil
}

// failoverRounds is what the rounds of one binary measured.
type failoverRounds struct {
	elected, granted []time.Duration
	// held and other are the lateness of the ticks due within
	// tickWindow of each stop that started, held by the stopped leader
	// or not.
	held, other []time.Duration
	// heldNotRun and otherNotRun count those ticks that never started,
	// twice those whose process started more than once.
	heldNotRun, otherNotRun, twice int
}

// sigName is SIGKILL, SIGSTOP or SIGTERM.
func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGSTOP:
		return "SIGSTOP"
	}
	return "SIGKILL"
}

// measureFailover starts a cluster of bin in dir and stops its leader
// with sig rounds times.
func measureFailover(ctx context.Context, bin, dir, profile string, sig syscall.Signal, rounds int, stderr io.Writer) (fr failoverRounds, err error) {
	cl, err := localcluster.Start(localcluster.Options{
		Binary: bin, Dir: dir, Servers: 3, StoreNode: true, Profile: profile, Jobs: failoverJobs(),
	})
	if err != nil {
		return fr, err
	}
	defer cl.Stop()

	// Let the schedule run for a few seconds first: right after the job
	// set is applied nothing is due until the next second.
	if err := localcluster.Until(60*time.Second, func() error {
		var out struct{ Counters map[string]uint64 }
		if err := cl.Servers()[0].GetJSON("/api/v1/events?limit=1", &out); err != nil {
			return err
		}
		if out.Counters["grants"] < 60 {
			return fmt.Errorf("%d grants so far", out.Counters["grants"])
		}
		return nil
	}); err != nil {
		return fr, err
	}
	for round := 1; round <= rounds && ctx.Err() == nil; round++ {
		e, g, ticks, err := failoverOnce(cl, sig)
		if err != nil {
			return fr, fmt.Errorf("round %d: %w", round, err)
		}
		fr.elected, fr.granted = append(fr.elected, e), append(fr.granted, g)
		fr.held, fr.other = append(fr.held, ticks.held...), append(fr.other, ticks.other...)
		fr.heldNotRun, fr.otherNotRun, fr.twice = fr.heldNotRun+ticks.heldNotRun, fr.otherNotRun+ticks.otherNotRun, fr.twice+ticks.twice
		worst := "-"
		if len(ticks.held) > 0 {
			worst = ms(slices.Max(ticks.held))
		}
		fmt.Fprintf(stderr, "round %2d: new epoch committed after %s, first grant after %s; ticks held %d (latest start %s late, %d never started), not held %d\n",
			round, ms(e), ms(g), len(ticks.held)+ticks.heldNotRun, worst, ticks.heldNotRun, len(ticks.other)+ticks.otherNotRun)
	}
	return fr, nil
}

// failoverOnce stops the leader with sig and measures until a surviving
// server has applied a grant of a later epoch; then it restarts the old
// leader on its data directory and waits for it to rejoin. Under SIGTERM
// the leader hands leadership over before it exits, so the clock runs from
// the signal, not from the exit. A leader stopped with SIGSTOP is killed
// once measured: its port still accepts (the kernel answers for it), so
// the followers must wait out their heartbeat timeout, as for a host that
// went silent.
func failoverOnce(cl *localcluster.Cluster, sig syscall.Signal) (elected, granted time.Duration, ticks failoverRounds, err error) {
	before, err := waitAgreed(cl, 60*time.Second)
	if err != nil {
		return 0, 0, ticks, err
	}
	old := cl.Node(before.Leader)
	var watch *localcluster.Node
	for _, n := range cl.Servers() {
		if n != old {
			watch = n
			break
		}
	}
	var evs struct{ Events []jobs.Event }
	if err := watch.GetJSON("/api/v1/events?limit=1", &evs); err != nil {
		return 0, 0, ticks, err
	}
	var after uint64
	if len(evs.Events) > 0 {
		after = evs.Events[0].Seq
	}

	killed := time.Now()
	if sig == syscall.SIGKILL {
		old.Kill()
	} else if err := old.Signal(sig); err != nil {
		return 0, 0, ticks, err
	}
	err = localcluster.UntilEvery(30*time.Second, 5*time.Millisecond, func() error {
		var evs struct{ Events []jobs.Event }
		if err := watch.GetJSON(fmt.Sprintf("/api/v1/events?after=%d&limit=5000", after), &evs); err != nil {
			return err
		}
		for _, e := range evs.Events {
			after = e.Seq
			if e.Kind == jobs.EventElected && e.Epoch > before.Epoch && elected == 0 {
				elected = time.Since(killed)
			}
			if e.Kind == jobs.EventGranted && e.Token != nil && e.Token.Epoch > before.Epoch {
				granted = time.Since(killed)
				return nil
			}
		}
		return fmt.Errorf("no grant after epoch %d yet", before.Epoch)
	})
	if err != nil {
		return 0, 0, ticks, err
	}
	if ticks, err = ticksAfter(watch, old.Name, killed); err != nil {
		return 0, 0, ticks, err
	}
	switch sig {
	case syscall.SIGSTOP:
		old.Kill()
	case syscall.SIGTERM:
		if err := old.WaitExit(30 * time.Second); err != nil {
			return 0, 0, ticks, fmt.Errorf("%s after %s: %w", old.Name, sigName(sig), err)
		}
	}
	if err := old.Start(); err != nil {
		return 0, 0, ticks, err
	}
	// Back to three servers before the next round.
	err = localcluster.Until(60*time.Second, func() error {
		st, err := old.Status()
		if err != nil {
			return err
		}
		if st.RaftState != "Follower" || st.Leader == "" {
			return fmt.Errorf("%s: %s, leader %q", old.Name, st.RaftState, st.Leader)
		}
		return nil
	})
	return elected, granted, ticks, err
}

// ticksAfter waits (bounded) for every run of the pulse jobs due within
// tickWindow after `stopped` to end, as n reads them, and measures when
// each started after its fire time, split by whether its first attempt
// was granted to the stopped leader before the stop.
func ticksAfter(n *localcluster.Node, leader string, stopped time.Time) (failoverRounds, error) {
	var fr failoverRounds
	err := localcluster.UntilEvery(60*time.Second, 200*time.Millisecond, func() error {
		fr = failoverRounds{}
		if over := stopped.Add(tickWindow + time.Second); time.Now().Before(over) {
			return fmt.Errorf("the window's last runs are granted by %s", over.Format(time.TimeOnly))
		}
		for i := range failoverPulses {
			spec := jobs.Spec{Name: fmt.Sprintf("pulse%02d", i), Jitter: jobs.Duration(failoverJitter)}
			runs, err := n.Runs(spec.Name, 20)
			if err != nil {
				return err
			}
			for _, r := range runs {
				fire := r.ScheduledAt.Add(spec.JitterFor(r.ScheduledAt))
				if !fire.After(stopped) || fire.After(stopped.Add(tickWindow)) {
					continue
				}
				if !r.State.Terminal() {
					return fmt.Errorf("run %s is %s", r.ID, r.State)
				}
				var starts []time.Time
				for _, a := range r.Attempts {
					if !a.StartedAt.IsZero() {
						starts = append(starts, a.StartedAt)
					}
				}
				held := len(r.Attempts) > 0 && r.Attempts[0].Worker == leader && r.Attempts[0].GrantedAt.Before(stopped)
				switch {
				case len(starts) == 0 && held:
					fr.heldNotRun++
				case len(starts) == 0:
					fr.otherNotRun++
				case held:
					fr.held = append(fr.held, starts[0].Sub(fire))
				default:
					fr.other = append(fr.other, starts[0].Sub(fire))
				}
				if len(starts) > 1 {
					fr.twice++
				}
			}
		}
		return nil
	})
	return fr, err
}
