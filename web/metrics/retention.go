package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencecron/fencecron/fencedstore"
)

// Retention counts what store retention deletes on the node that holds
// the store.
type Retention struct {
	deleted *prometheus.CounterVec // prefix, reason
	dropped prometheus.Counter
}

// Retention registers the store retention counters on n and returns
// them; call it once, on the node that holds the store.
func (n *Node) Retention() *Retention {
	r := &Retention{
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencecron_store_retention_deleted_total",
			Help: "Keys store retention deleted (leaving a tombstone), by the rule's prefix and reason: age (max_age) or count (max_keys).",
		}, []string{"prefix", "reason"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencecron_store_tombstones_dropped_total",
			Help: "Tombstones of deleted keys dropped after store.tombstone_ttl (their tokens raise their prefix's floor).",
		}),
	}
	n.reg.MustRegister(r.deleted, r.dropped)
	return r
}

// Deleted counts one sweep step's deletions (fencedstore.Retainer.OnDelete).
func (r *Retention) Deleted(rule fencedstore.RetentionRule, byAge, byCount int) {
	r.deleted.WithLabelValues(rule.Prefix, "age").Add(float64(byAge))
	r.deleted.WithLabelValues(rule.Prefix, "count").Add(float64(byCount))
}

// Dropped counts dropped tombstones (fencedstore.Retainer.OnDrop).
func (r *Retention) Dropped(n int) { r.dropped.Add(float64(n)) }

// GetVersion keeps the counted store's earlier versions readable.
func (s countingStore) GetVersion(ctx context.Context, key string, v uint64) (fencedstore.Object, error) {
	return fencedstore.GetVersion(ctx, s.Store, key, v)
}

// ListPage keeps the counted store's listing paged.
func (s countingStore) ListPage(ctx context.Context, prefix, after string, limit int) (fencedstore.Page, error) {
	return fencedstore.ListPage(ctx, s.Store, prefix, after, limit)
}
