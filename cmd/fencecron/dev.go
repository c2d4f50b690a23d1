package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/fencecron/fencecron/cmd/internal/agent"
	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/cmd/internal/jobfile"
	"github.com/fencecron/fencecron/deploy/examples"
	"github.com/fencecron/fencecron/jobs"
)

func runDev(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpAddr := fs.String("http", defaultListenAddr(), "HTTP address for the API and dashboard (default $FENCECRON_ADDR, else "+config.DefaultAddr+"; the other commands find it there too)")
	dataDir := fs.String("data", filepath.Join(os.TempDir(), "fencecron-dev"), "data directory (Raft log, snapshots, store)")
	raftPort := fs.Int("raft-port", config.DefaultRaftPort, "Raft port on the -http host")
	gossipPort := fs.Int("gossip-port", config.DefaultGossipPort, "gossip port on the -http host")
	apiToken := fs.String("api-token", os.Getenv("FENCECRON_API_TOKEN"), "token the API and dashboard require to trigger, pause and resume (default $FENCECRON_API_TOKEN; empty: none, and only clients on this host may change things)")
	readOnly := fs.Bool("read-only", false, "refuse every change through the public API and hide the dashboard's buttons")
	logFormat := logFormatFlag(fs)
	jobsFile := fs.String("jobs", "", "run this file's jobs (or every job file of this directory) instead of the examples; checked first, and applied at each start over whatever set the data directory holds (default -data: "+filepath.Join(os.TempDir(), "fencecron-dev-jobs")+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("dev takes no arguments, got %q (a job file goes after -jobs)", fs.Args())
	}
	dataSet := false
	fs.Visit(func(f *flag.Flag) { dataSet = dataSet || f.Name == "data" })
	if *jobsFile != "" && !dataSet {
		// Your jobs' runs apart from the examples'.
		*dataDir = filepath.Join(os.TempDir(), "fencecron-dev-jobs")
	}
	if *apiToken != "" {
		if err := config.CheckSecret(*apiToken); err != nil {
			return fmt.Errorf("-api-token: %w", err)
		}
	}
	logCfg, err := withLogFormat(config.Defaults().Log, *logFormat)
	if err != nil {
		return err
	}
	specs, source, err := devJobs(*jobsFile)
	if err != nil {
		return err
	}
	log := newLogger(stderr, logCfg)
	raiseProcs(log)
	log.Info("fencecron dev: a single-node cluster", "jobs", source, "count", len(specs), "data", *dataDir)
	host, port, err := splitHostPort(*httpAddr)
	if err != nil {
		return fmt.Errorf("-http: %w", err)
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return err
	}
	secret, err := loadOrCreateSecret(*dataDir)
	if err != nil {
		return err
	}
	cfg := devConfig(*dataDir, host, port, *raftPort, *gossipPort, secret)
	cfg.API.Token, cfg.API.ReadOnly = *apiToken, *readOnly
	return agent.Run(ctx, cfg, agent.Options{Logger: log, Jobs: &agent.Jobs{Specs: specs, Source: source, Replace: *jobsFile != ""}})
}

// devRetention keeps `fencecron dev`'s store small: its report job
// writes a key every 5 seconds (17,280 a day), and a dev node keeps the
// latest 2,000 of them.
var devRetention = []config.RetentionRule{{Prefix: "reports/", MaxKeys: 2000}}

// devConfig is the config of dev's node: the defaults of a config file,
// a single server named dev that bootstraps alone and serves its bolt
// store, listening on host (the default bind if empty).
func devConfig(dataDir, host string, httpPort, raftPort, gossipPort int, secret []byte) *config.File {
	cfg := config.Defaults()
	cfg.Node.Name, cfg.Node.DataDir = "dev", dataDir
	if host != "" {
		cfg.Node.Bind = host
	}
	cfg.Node.Ports = config.Ports{HTTP: httpPort, Raft: raftPort, Gossip: gossipPort}
	cfg.Node.BootstrapExpect = 1
	cfg.Cluster.Secret = string(secret)
	cfg.Store.Serve, cfg.Store.Retention = true, devRetention
	return cfg
}

// devJobs returns the jobs dev runs: the file's (or directory's), checked
// as apply checks them, or the embedded examples.
func devJobs(file string) ([]jobs.Spec, string, error) {
	if file == "" {
		cfg, err := config.Parse("deploy/examples/dev.yaml", examples.Dev)
		if err != nil {
			return nil, "", err
		}
		specs, err := cfg.Specs()
		return specs, "embedded deploy/examples/dev.yaml", err
	}
	specs, err := jobfile.ReadSet(file)
	if err != nil {
		return nil, "", fmt.Errorf("-jobs: %w", err)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		abs = file
	}
	return specs, "fencecron dev -jobs " + abs, nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, port, nil
}
