package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
)

// readStore reads the store's final state: every key and every decision
// on it. The same fencedstore.Store interface reads a cluster's store over
// HTTP (httpstore.Client) and a test's store in memory.
func readStore(ctx context.Context, s fencedstore.Store, o *Observation) error {
	keys, err := s.List(ctx, "")
	if err != nil {
		return fmt.Errorf("list the store: %w", err)
	}
	o.Keys = keys
	o.AddStoreListing(time.Now(), keys)
	for _, m := range keys {
		h, err := s.History(ctx, m.Key)
		if err != nil {
			return fmt.Errorf("history of %s: %w", m.Key, err)
		}
		o.Histories[m.Key] = h
	}
	return nil
}
