// Package feed hands what the FSM applies to the goroutines that act on
// it, without ever making Apply wait for them: Raft applies entries one
// after the other, so a subscriber that blocked Apply would stall the
// cluster's log on this server.
//
// Two shapes: Signals wakes subscribers, coalesced, and they read the
// state themselves (the dashboard's live updates); a Hub delivers typed
// items in order to each subscriber, bounded, and says so when it dropped
// them (the leader's changes). Both are safe for concurrent use.
package feed

import "sync"

// Signals wakes every subscriber after each Signal; signals a subscriber
// has not taken yet are coalesced into one.
type Signals struct {
	mu   sync.Mutex
	subs map[chan struct{}]bool
}

// Subscribe returns a channel signalled, coalesced, after every Signal,
// and a function that ends the subscription.
func (s *Signals) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.subs == nil {
		s.subs = map[chan struct{}]bool{}
	}
	s.subs[ch] = true
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.subs, ch)
		s.mu.Unlock()
	}
}

// Signal wakes every subscriber; it never blocks.
func (s *Signals) Signal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		wake(ch)
	}
}

// Len counts the subscriptions.
func (s *Signals) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Hub delivers published items to each of its feeds, in order. A feed
// holds at most max items its reader has not taken: past that it drops
// them all and its next Take returns the single item resync, which tells
// the reader it must read the state again. So nothing is lost silently,
// and a reader that stopped reading costs a bounded amount of memory.
type Hub[T any] struct {
	max    int
	resync T
	mu     sync.Mutex
	feeds  map[*Feed[T]]bool
}

// NewHub returns a hub whose feeds hold at most max items, and say resync
// after they dropped some.
func NewHub[T any](max int, resync T) *Hub[T] {
	return &Hub[T]{max: max, resync: resync, feeds: map[*Feed[T]]bool{}}
}

// Subscribe returns a new feed of the items published from now on; Close
// ends it.
func (h *Hub[T]) Subscribe() *Feed[T] {
	c := &Feed[T]{hub: h, ready: make(chan struct{}, 1)}
	h.mu.Lock()
	h.feeds[c] = true
	h.mu.Unlock()
	return c
}

// Publish hands items to every feed; it never blocks on a reader.
func (h *Hub[T]) Publish(items []T) {
	if len(items) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.feeds {
		c.add(items)
	}
}

// Feed is one subscriber's queue of a Hub's items.
type Feed[T any] struct {
	hub     *Hub[T]
	mu      sync.Mutex
	pending []T
	resync  bool
	ready   chan struct{}
}

// Ready is signalled, coalesced, when Take has something.
func (c *Feed[T]) Ready() <-chan struct{} { return c.ready }

// Take returns the items published since the last Take, oldest first;
// after an overflow it returns the hub's resync item alone.
func (c *Feed[T]) Take() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.pending
	if c.resync {
		out = []T{c.hub.resync}
	}
	c.pending, c.resync = nil, false
	return out
}

// Close ends the subscription.
func (c *Feed[T]) Close() {
	c.hub.mu.Lock()
	delete(c.hub.feeds, c)
	c.hub.mu.Unlock()
}

func (c *Feed[T]) add(items []T) {
	c.mu.Lock()
	switch {
	case c.resync:
	case len(c.pending)+len(items) > c.hub.max:
		c.pending, c.resync = nil, true
	default:
		c.pending = append(c.pending, items...)
	}
	c.mu.Unlock()
	wake(c.ready)
}
