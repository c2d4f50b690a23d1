// Command fencebench measures a whole local cluster of fencecron processes:
//
//	fencebench failover [-rounds 20] [-profile default|fast] [-signal kill|stop|term] [-compare BIN]
//	    SIGKILL the leader again and again; time from the kill to the new
//	    leader's first committed grant. -compare measures another binary
//	    first, in the same run, and prints both side by side.
//	fencebench lateness [-rates 10,100] [-duration 30s] [-bare 10s] [-http] [-process=false] [-tracing off|on|both]
//	    jobs firing N times a second; lateness (process start minus
//	    scheduled time) and sustained runs per second; and, for
//	    reference, the same starts made with no cluster running. -http
//	    also measures HTTP jobs against a receiver on loopback (arrival
//	    minus Fencecron-Scheduled-At), and their reference, the same
//	    requests sent with no cluster running; -tracing has the nodes export
//	    every run's trace to a sink on loopback, both: off, then on.
//	fencebench starts -rate N -at UNIXNANO -seconds S [-url URL]
//	    one of the processes that make lateness's reference starts (or,
//	    with -url, requests).
//	fencebench scale [-jobs 10000,100000] [-settle 10s] [-cluster=false] [-compare BIN]
//	    N jobs applied to a dev node and to three servers: apply time,
//	    RSS per node, the Jobs page; snapshot size, restore time and the
//	    cost of one fire for a set that size. -compare measures another
//	    binary before this one at each size; -cluster=false only the dev
//	    node.
//	fencebench exports [-jobs 100000] [-clients 16] [-settle 10s] [-compare BIN]
//	    a dev node holding N jobs; C clients export the whole job set at
//	    once (GET /api/v1/jobset with the API token): the node's idle and
//	    highest RSS, against issue 30's bound of 2 × idle + 64 MiB.
//
// It builds nothing: -bin names the fencecron binary (default: build it
// into a temporary directory with `go build`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "fencebench:", err)
		}
		os.Exit(1)
	}
}

const usage = `usage:
  fencebench failover [-rounds N] [-profile default|fast] [-signal kill|stop|term] [-compare PATH] [-bin PATH] [-keep DIR]
  fencebench lateness [-rates 10,100] [-duration D] [-bare D] [-http] [-process=false] [-tracing off|on|both] [-compare PATH] [-bin PATH] [-keep DIR]
  fencebench scale [-jobs 10000,100000] [-settle D] [-cluster=false] [-compare PATH] [-bin PATH] [-keep DIR]
  fencebench exports [-jobs 100000] [-clients 16] [-settle D] [-compare PATH] [-bin PATH] [-keep DIR]
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "failover":
		return runFailover(ctx, args[1:], stdout, stderr)
	case "lateness":
		return runLateness(ctx, args[1:], stdout, stderr)
	case "scale":
		return runScale(ctx, args[1:], stdout, stderr)
	case "exports":
		return runExports(ctx, args[1:], stdout, stderr)
	case "starts":
		return runStarts(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown benchmark %q", args[0])
}

// common are the flags every benchmark takes.
type common struct {
	bin     string
	keep    string
	compare string
}

// benchFlags returns a benchmark's flag set with the common flags on it.
func benchFlags(name string, stderr io.Writer) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &common{}
	c.register(fs)
	return fs, c
}

// parse parses args and sets the benchmark up (see setup).
func (c *common) parse(fs *flag.FlagSet, args []string) (bin, dir string, cleanup func(), err error) {
	if err := fs.Parse(args); err != nil {
		return "", "", nil, err
	}
	return c.setup()
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.bin, "bin", "", "fencecron binary (default: go build ./cmd/fencecron)")
	fs.StringVar(&c.keep, "keep", "", "keep configs, data and logs in this directory (default: a removed temp dir)")
	fs.StringVar(&c.compare, "compare", "", "another fencecron binary (an older build, say) to measure first, in the same run, for a side-by-side table")
}

// binaries returns what to measure, in order: the -compare binary if one
// was given, then bin; and how the table names each.
func (c *common) binaries(bin string) (bins, labels []string) {
	if c.compare == "" {
		return []string{bin}, []string{bin}
	}
	return []string{c.compare, bin}, []string{"compare (" + c.compare + ")", "this (" + bin + ")"}
}

// setup returns the binary and the working directory, and a cleanup.
func (c *common) setup() (bin, dir string, cleanup func(), err error) {
	dir = c.keep
	var tmp string
	if dir == "" {
		tmp, err = os.MkdirTemp("", "fencebench-")
		if err != nil {
			return "", "", nil, err
		}
		dir = tmp
	} else if err = os.MkdirAll(dir, 0o755); err != nil {
		return "", "", nil, err
	}
	cleanup = func() {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}
	bin = c.bin
	if bin == "" {
		bin = filepath.Join(dir, "fencecron")
		cmd := exec.Command("go", "build", "-o", bin, "github.com/fencecron/fencecron/cmd/fencecron")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err = cmd.Run(); err != nil {
			cleanup()
			return "", "", nil, fmt.Errorf("go build: %w", err)
		}
	}
	return bin, dir, cleanup, nil
}

// Summary is min, median, p99 and max of a sample.
type Summary struct {
	N                  int
	Min, P50, P99, Max time.Duration
}

func summarize(d []time.Duration) Summary {
	if len(d) == 0 {
		return Summary{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(p float64) time.Duration {
		i := int(p*float64(len(s)-1) + 0.5)
		return s[min(i, len(s)-1)]
	}
	return Summary{N: len(s), Min: s[0], P50: q(0.5), P99: q(0.99), Max: s[len(s)-1]}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

// waitAgreed waits for the live servers to agree on a leader.
func waitAgreed(c *localcluster.Cluster, d time.Duration) (localcluster.Agreement, error) {
	var a localcluster.Agreement
	err := localcluster.Until(d, func() error {
		var err error
		a, err = localcluster.Agreed(c.Live(c.Servers()))
		return err
	})
	return a, err
}
