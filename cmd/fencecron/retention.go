package main

import (
	"context"
	"log/slog"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/web/metrics"
)

// devRetention keeps `fencecron dev`'s store small: its report job
// writes a key every 5 seconds (17,280 a day), and a dev node keeps the
// latest 2,000 of them.
var devRetention = []config.RetentionRule{{Prefix: "reports/", MaxKeys: 2000}}

// startRetention starts store retention on the node that holds the store
// (bolt or postgres; a remote store's retention runs where it is served).
// It runs even without rules, so tombstones left by rules since removed
// still go in their time. It returns the closer, or nil when this node
// does not hold the store.
func startRetention(o nodeOptions, store fencedstore.Store, m *metrics.Node, log *slog.Logger) (func(context.Context) error, error) {
	sw, ok := store.(fencedstore.Sweeper)
	if !ok || o.Store.Backend == config.BackendRemote {
		return nil, nil
	}
	counts := m.Retention()
	r := &fencedstore.Retainer{
		Store:        sw,
		TombstoneTTL: o.Store.TombstoneTTL.D(),
		Logger:       log,
		OnDelete:     counts.Deleted,
		OnDrop:       counts.Dropped,
	}
	for _, rule := range o.Store.Retention {
		r.Rules = append(r.Rules, fencedstore.RetentionRule{Prefix: rule.Prefix, MaxAge: rule.MaxAge.D(), MaxKeys: rule.MaxKeys})
	}
	if err := r.Start(); err != nil {
		return nil, err
	}
	if len(r.Rules) > 0 {
		log.Info("store retention on", "rules", len(r.Rules), "tombstone_ttl", r.TombstoneTTL, "keep_versions", o.Store.KeepVersions)
	}
	return func(context.Context) error { r.Close(); return nil }, nil
}
