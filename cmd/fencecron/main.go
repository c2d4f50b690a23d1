// Command fencecron is the distributed cron that cannot be fooled by a
// paused worker. One binary: a node of the cluster, and the client
// commands that talk to one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/scheduler/buildinfo"
)

const usage = `fencecron — a distributed cron whose outputs are fenced

Usage:
  fencecron dev [-http ADDR] [-data DIR] [-jobs FILE] [-log-format json]
                                          a complete single-node cluster with example jobs (or FILE's)
  fencecron demo [-http ADDR] [-loop]      a paused worker's late write refused, live: a real cluster on loopback
  fencecron agent -config FILE [-log-format json]
                                          one node of a real cluster
  fencecron status | jobs | runs [JOB] [-since 24h] [-state failed] [-limit N]
                                          look at a cluster (-addr HOST:PORT or FENCECRON_ADDR)
  fencecron explain JOB@TIME               what became of a fire time (TIME: RFC 3339, or a wall time in the job's zone)
  fencecron trigger | pause | resume JOB   act on a job (trigger -force: whatever its overlap policy says)
  fencecron backfill -from TIME -to TIME [-dry-run] [-max-running N] JOB
                                          one run per fire time in [from, to) that has none
  fencecron apply [-dry-run] FILE|DIR      replace the cluster's job set with FILE's jobs, or those of every *.yaml in DIR
                                          (-dry-run: print what would be added, removed, changed; apply nothing)
  fencecron publish KEY [FILE]             publish to the fenced store with $FENCECRON_TOKEN (inside a job)
  fencecron get [-version N] KEY           write a key's body (or a kept earlier one) to stdout
  fencecron validate FILE|DIR              check a config file or a directory of job files; list each job's next fire times
  fencecron health [-live]                 exit 0 if the node is ready (-live: alive), else 1
  fencecron operator raft list-peers       the Raft configuration with each server's gossip state
  fencecron operator raft remove-peer NAME remove a server that is gone for good from Raft
  fencecron snapshot save|restore FILE     back up or restore the replicated state (leader; api.token)
  fencecron release -reason TEXT ATTEMPT   end a stuck attempt's lease now; its run is retried with a newer token
  fencecron acl bootstrap                  create the first management token (once; ACLs on), print its secret
  fencecron acl policy apply NAME FILE | list | delete NAME
                                          the access policies (docs/teams-and-access.md)
  fencecron acl token create -name N -policy P [-policy P2] [-ttl D] | list | revoke ACCESSOR
                                          access tokens; a secret is printed once, at creation
  fencecron version                        this binary's version, commit, log version and Go version

Run "fencecron COMMAND -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	var ec exitCode
	usage := errors.Is(err, flag.ErrHelp) || errors.As(err, &ec) && ec == exitUsage
	if usage && askedForHelp(os.Args[1:]) {
		os.Exit(0) // the usage was what was asked for
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(exitUsage)
	}
	if err != nil {
		if errors.As(err, &ec) {
			os.Exit(int(ec))
		}
		fmt.Fprintln(os.Stderr, "fencecron:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "dev":
		return runDev(ctx, args[1:], stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "agent":
		return runAgent(ctx, args[1:], stderr)
	case "apply":
		return runApply(ctx, args[1:], stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], stdout, stderr)
	case "jobs":
		return runJobs(ctx, args[1:], stdout, stderr)
	case "runs":
		return runRuns(ctx, args[1:], stdout, stderr)
	case "explain":
		return runExplain(ctx, args[1:], stdout, stderr)
	case "trigger", "pause", "resume":
		return runJobAction(args[0])(ctx, args[1:], stdout, stderr)
	case "backfill":
		return runBackfill(ctx, args[1:], stdout, stderr)
	case "publish":
		return runPublish(ctx, args[1:], os.Stdin, stdout, stderr)
	case "get":
		return runGet(ctx, args[1:], stdout, stderr)
	case "validate":
		return runValidate(args[1:], stdout, stderr)
	case "health":
		return runHealth(ctx, args[1:], stdout, stderr)
	case "operator":
		return runOperator(ctx, args[1:], stdout, stderr)
	case "snapshot":
		return runSnapshot(ctx, args[1:], stdout, stderr)
	case "release":
		return runRelease(ctx, args[1:], stdout, stderr)
	case "acl":
		return runACL(ctx, args[1:], stdout, stderr)
	case "version", "-version", "--version":
		return runVersion(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// runVersion prints which build this is: what a bug report needs, and
// what tells whether two nodes can share a cluster (the log version).
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: fencecron version")
		return flag.ErrHelp
	}
	_, err := fmt.Fprint(stdout, buildinfo.Get())
	return err
}

// askedForHelp reports whether args ask for a command's usage (-h,
// -help, --help before any "--"): the usage is then the answer, exit 0.
func askedForHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help", "--h":
			return true
		}
	}
	return false
}

// exitCode is an error that only carries a process exit status.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// newLogger is the node's logger, the one place its handler is chosen
// (log: and -log-format).
func newLogger(w io.Writer, l config.Log) *slog.Logger {
	opts := &slog.HandlerOptions{Level: l.SlogLevel()}
	if l.Format == config.LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// logFormatFlag adds -log-format to a node's flags: it overrides the
// config's log.format, so one run can be switched without editing the
// file.
func logFormatFlag(fs *flag.FlagSet) *string {
	return fs.String("log-format", "", "log format: text or json (default: the config's log.format, else text)")
}

// withLogFormat applies -log-format (if given) over the config's log
// section.
func withLogFormat(l config.Log, flagValue string) (config.Log, error) {
	if flagValue == "" {
		return l, nil
	}
	if err := config.CheckLogFormat(flagValue); err != nil {
		return l, fmt.Errorf("-log-format: %w", err)
	}
	l.Format = flagValue
	return l, nil
}
