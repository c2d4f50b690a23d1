package main

import (
	"math/rand/v2"
	"time"
)

// Both proxies hold traffic as waiters blocked on a channel each; these
// let them go.

// deliverAll lets every held waiter go, in arrival order.
func deliverAll(held []chan struct{}) {
	for _, ch := range held {
		close(ch)
	}
}

// deliverShuffled lets held waiters go one by one in an order drawn from
// rng, each up to gap after the previous (all at once when done closes),
// and returns how many there were.
func deliverShuffled(held []chan struct{}, rng *rand.Rand, gap time.Duration, done <-chan struct{}) int {
	rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	for i, ch := range held {
		if i > 0 && gap > 0 {
			select {
			case <-time.After(time.Duration(rng.Int64N(int64(gap)))):
			case <-done:
			}
		}
		close(ch)
	}
	return len(held)
}
