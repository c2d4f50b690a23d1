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

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/deploy/examples"
	"github.com/fencecron/fencecron/jobs"
)

func runDev(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpAddr := fs.String("http", config.DefaultAddr, "HTTP address for the API and dashboard")
	dataDir := fs.String("data", filepath.Join(os.TempDir(), "fencecron-dev"), "data directory (Raft log, snapshots, store)")
	raftPort := fs.Int("raft-port", config.DefaultRaftPort, "Raft port on the -http host")
	gossipPort := fs.Int("gossip-port", config.DefaultGossipPort, "gossip port on the -http host")
	apiToken := fs.String("api-token", os.Getenv("FENCECRON_API_TOKEN"), "token the API and dashboard require to trigger, pause and resume (default $FENCECRON_API_TOKEN; empty: none, and only clients on this host may change things)")
	readOnly := fs.Bool("read-only", false, "refuse every change through the public API and hide the dashboard's buttons")
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
	specs, source, err := devJobs(*jobsFile)
	if err != nil {
		return err
	}
	log := newLogger(stderr)
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
	return runNode(ctx, log, nodeOptions{
		ID:              "dev",
		DataDir:         *dataDir,
		Server:          true,
		RunJobs:         true,
		JobNice:         config.DefaultJobNice,
		Store:           config.Store{Backend: config.BackendBolt, Serve: true, Retention: devRetention},
		Bind:            host,
		HTTPPort:        port,
		RaftPort:        *raftPort,
		GossipPort:      *gossipPort,
		BootstrapExpect: 1,
		Secret:          secret,
		InitialJobs:     specs,
		InitialSource:   source,
		ReplaceJobs:     *jobsFile != "",
		ConfigHash:      jobs.HashSpecs(specs),
		API:             config.API{Token: *apiToken, ReadOnly: *readOnly},
	})
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
	specs, err := readJobSet(file)
	if err != nil {
		return nil, "", fmt.Errorf("-jobs: %w", err)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		abs = file
	}
	return specs, "fencecron dev -jobs " + abs, nil
}

func netJoin(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

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
