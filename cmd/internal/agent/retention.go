package agent

import (
	"context"
	"log/slog"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/web/metrics"
)

// startRetention starts store retention on the node that holds the store
// (bolt or postgres; a remote store's retention runs where it is served).
// It runs even without rules, so tombstones left by rules since removed
// still go in their time. It returns the closer, or nil when this node
// does not hold the store.
func startRetention(s config.Store, store fencedstore.Store, m *metrics.Node, log *slog.Logger) (func(context.Context) error, error) {
	sw, ok := store.(fencedstore.Sweeper)
	if !ok || s.Backend == config.BackendRemote {
		return nil, nil
	}
	counts := m.Retention()
	r := &fencedstore.Retainer{
		Store:        sw,
		TombstoneTTL: s.TombstoneTTL.D(),
		Logger:       log,
		OnDelete:     counts.Deleted,
		OnDrop:       counts.Dropped,
	}
	for _, rule := range s.Retention {
		r.Rules = append(r.Rules, fencedstore.RetentionRule{Prefix: rule.Prefix, MaxAge: rule.MaxAge.D(), MaxKeys: rule.MaxKeys})
	}
	if err := r.Start(); err != nil {
		return nil, err
	}
	if len(r.Rules) > 0 {
		log.Info("store retention on", "rules", len(r.Rules), "tombstone_ttl", r.TombstoneTTL, "keep_versions", s.KeepVersions)
	}
	return func(context.Context) error { r.Close(); return nil }, nil
}
