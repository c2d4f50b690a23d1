// Command fencecheck attacks a real fencecron cluster and checks that
// nothing stale was ever accepted.
//
// It starts servers, workers and a store node of the fencecron binary
// (each in its own network namespace when run as root, else all on
// 127.0.0.1), gives them jobs whose runs contend for shared keys, and for
// -duration runs a nemesis drawn from -seed: SIGSTOP of the leader or of a
// worker running an attempt for longer than the lease, SIGKILL and
// restart of the leader, of any node, of every server at once and of the
// store, store calls held and delivered out of order, the store
// unreachable, the leader isolated, a worker cut from the leader but not
// from the store, and random splits. Some nodes also carry built-in
// faults (a worker that stops itself right before publishing, lost
// renewal replies, lost dispatch replies), which exist only in a test
// build: it builds the binary with -tags fencecron_faults, and refuses a
// -bin built without them. The workers reach the store
// through a proxy in the harness, which injects the store link's faults
// and records every establish and publish with the answer the worker got.
// Then it heals everything, waits for the runs to finish, reads every run,
// event, skip and every decision of the store through the API, and checks
// them all (see check.go): the store by its own history and by its
// answers, the cluster by its runs, grants and tokens.
//
// Partitions need root and iproute2: every node then runs in its own
// network namespace on a bridge the harness creates, and a cut is a
// blackhole route on both sides. Without them (or with -net loopback)
// every node listens on 127.0.0.1 and the schedule has no partitions.
// The namespaces are removed at the end; a harness killed with SIGKILL
// leaves them (ip netns list: fc<id>-<node>; the bridge is fcb<id>).
//
// It prints a summary table, writes a JSON report, and exits 1 when a
// check fails (2 when it could not run). The same -seed replays the same
// fault schedule.
//
//	go run ./cmd/fencecheck -duration 30m -seed 1
package main

import (
	"context"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fencecron/fencecron/scheduler/faults"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencecheck:", err)
	}
	os.Exit(code)
}

// run parses flags, runs the harness and reports; it returns the exit
// code: 0 no violation, 1 violations, 2 could not run.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("fencecheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	fs.DurationVar(&cfg.Duration, "duration", time.Minute, "how long the nemesis attacks the cluster")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the fault schedule; the same seed replays it")
	fs.IntVar(&cfg.Servers, "servers", 3, "Raft servers (they run jobs too)")
	fs.IntVar(&cfg.Workers, "workers", 2, "worker nodes (w1 stops itself before publishing, w2 loses renewal replies)")
	fs.StringVar(&cfg.Net, "net", "auto", "auto: network namespaces when root, else loopback; netns; loopback (no partitions)")
	fs.DurationVar(&cfg.Lease, "lease", 2*time.Second, "the jobs' lease_ttl; pauses and partitions outlast it")
	fs.DurationVar(&cfg.Drain, "drain", 90*time.Second, "how long to wait, after healing, for every run to finish")
	fs.StringVar(&cfg.Binary, "bin", "", "the fencecron binary, a test build with the fault hooks (default: go build -tags "+faults.BuildTag+" ./cmd/fencecron)")
	fs.StringVar(&cfg.Dir, "dir", "", "work directory for configs, data, logs and the report (default: a new temporary one)")
	reportPath := fs.String("report", "", "JSON report path (default: DIR/report.json)")
	quiet := fs.Bool("q", false, "no progress lines")
	plan := fs.Bool("plan", false, "print the fault schedule the seed draws, and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, nil
		}
		return 2, err
	}
	if fs.NArg() > 0 {
		return 2, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.Duration <= 0 || cfg.Servers < 1 || cfg.Workers < 0 {
		return 2, errors.New("-duration must be positive, -servers at least 1, -workers at least 0")
	}
	if *plan {
		partitions := cfg.Net == "netns" || cfg.Net == "auto" && netnsAvailable() == nil
		for _, op := range Schedule(cfg.Seed, cfg.Duration, cfg.Lease, partitions) {
			fmt.Fprintln(stdout, op)
		}
		return 0, nil
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "fencecheck-")
		if err != nil {
			return 2, err
		}
		cfg.Dir = d
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return 2, err
	}
	if !*quiet {
		cfg.Log = stderr
	}
	if cfg.Binary == "" {
		bin := filepath.Join(cfg.Dir, "fencecron")
		fmt.Fprintf(stderr, "building %s\n", bin)
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", faults.BuildTag, "-o", bin, "github.com/fencecron/fencecron/cmd/fencecron")
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Run(); err != nil {
			return 2, fmt.Errorf("build fencecron (run from the repository, or give -bin): %w", err)
		}
		cfg.Binary = bin
	}
	if err := checkFaultsBuilt(cfg.Binary); err != nil {
		return 2, err
	}
	rep, err := New(cfg).Run(ctx)
	if err != nil {
		return 2, fmt.Errorf("%w (logs in %s)", err, cfg.Dir)
	}
	if *reportPath == "" {
		*reportPath = filepath.Join(cfg.Dir, "report.json")
	}
	rep.Print(stdout)
	if err := rep.WriteJSON(*reportPath); err != nil {
		return 2, err
	}
	fmt.Fprintf(stdout, "report: %s\n", *reportPath)
	fmt.Fprintf(stdout, "node logs: %s\n", cfg.Dir)
	if !rep.OK {
		return 1, nil
	}
	return 0, nil
}

// checkFaultsBuilt refuses a binary built without the fault hooks: the
// workers fencecheck starts inject faults (FENCECRON_FAULTS), which such
// a binary refuses, so the run would fail late and less clearly.
func checkFaultsBuilt(bin string) error {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("-bin %s: %w", bin, err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), faults.BuildTag) {
			return nil
		}
	}
	return fmt.Errorf("-bin %s was built without the fault hooks its workers need: build it with go build -tags %s ./cmd/fencecron", bin, faults.BuildTag)
}
