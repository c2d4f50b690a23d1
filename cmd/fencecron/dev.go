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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *apiToken != "" {
		if err := config.CheckSecret(*apiToken); err != nil {
			return fmt.Errorf("-api-token: %w", err)
		}
	}
	log := newLogger(stderr)
	log.Info("fencecron dev: a single-node cluster with the example jobs", "data", *dataDir)
	cfg, err := config.Parse("deploy/examples/dev.yaml", examples.Dev)
	if err != nil {
		return err
	}
	specs, err := cfg.Specs()
	if err != nil {
		return err
	}
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
		Store:           config.Store{Backend: config.BackendBolt, Serve: true, Retention: devRetention},
		Bind:            host,
		HTTPPort:        port,
		RaftPort:        *raftPort,
		GossipPort:      *gossipPort,
		BootstrapExpect: 1,
		Secret:          secret,
		InitialJobs:     specs,
		InitialSource:   "embedded deploy/examples/dev.yaml",
		ConfigHash:      jobs.HashSpecs(specs),
		API:             config.API{Token: *apiToken, ReadOnly: *readOnly},
	})
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
