package election

import "github.com/hashicorp/raft"

// SetLogStoreWrapper puts w between Raft and its log store.
func (c *Config) SetLogStoreWrapper(w func(raft.LogStore) raft.LogStore) { c.wrapLogStore = w }
