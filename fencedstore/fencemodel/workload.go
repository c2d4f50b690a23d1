package fencemodel

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
)

// Workload is a concurrent mix of establish, publish and get calls with
// random tokens on a few keys. Tokens follow a clock shared by all clients,
// as grants do, but a third of the calls come from "late" writers holding a
// token up to Spread ticks old; a tenth of the publishes repeat the client's
// previous publish; a fifth carry an expected version. A tenth of the
// writes carry an expiry long past (refused as expired), a fifth one far in
// the future. So calls are applied, refused as stale or expired, conflict,
// and retried, concurrently.
type Workload struct {
	Keys    []string
	Clients int
	Calls   int    // per client
	Spread  int    // how old a late writer's token may be (default 24)
	Seed    uint64 // seeds each client's choices
}

// Counts is how many calls ended each way.
type Counts struct {
	Applied, StaleOwner, Conflict, Established, Expired, Gets, Unknown int
	// FirstError is the first failure with an unknown outcome.
	FirstError error
}

func (c Counts) String() string {
	return fmt.Sprintf("applied %d, stale_owner %d, conflict %d, established %d, expired %d, gets %d, unknown %d",
		c.Applied, c.StaleOwner, c.Conflict, c.Established, c.Expired, c.Gets, c.Unknown)
}

// Expiries of the workload's expiring calls: whole seconds, so that they
// survive every backend and the signed token form unchanged.
var (
	expiredLongAgo  = time.Unix(1_000_000_000, 0).UTC() // 2001
	expiresFarAhead = time.Unix(4_102_444_800, 0).UTC() // 2100
)

// Run drives s with the workload, recording every call in r, until every
// client has made its calls or ctx ends.
func (w Workload) Run(ctx context.Context, s fencedstore.Store, r *Recorder) Counts {
	spread := w.Spread
	if spread <= 0 {
		spread = 24
	}
	var mu sync.Mutex
	var total Counts
	var clock atomic.Uint64
	var wg sync.WaitGroup
	for c := range w.Clients {
		wg.Go(func() {
			cnt := w.client(ctx, s, r, c, spread, &clock)
			mu.Lock()
			defer mu.Unlock()
			total.Applied += cnt.Applied
			total.StaleOwner += cnt.StaleOwner
			total.Conflict += cnt.Conflict
			total.Established += cnt.Established
			total.Expired += cnt.Expired
			total.Gets += cnt.Gets
			total.Unknown += cnt.Unknown
			if total.FirstError == nil {
				total.FirstError = cnt.FirstError
			}
		})
	}
	wg.Wait()
	return total
}

func (w Workload) client(ctx context.Context, s fencedstore.Store, r *Recorder, client, spread int, clock *atomic.Uint64) Counts {
	rng := rand.New(rand.NewPCG(w.Seed, uint64(client)))
	bodies := [][]byte{[]byte("alpha"), []byte("beta"), []byte("gamma,delta\n")}
	seen := map[string]uint64{} // last version this client saw per key
	var last *fencedstore.PublishRequest
	var cnt Counts
	count := func(res fencedstore.Result, err error) {
		switch {
		case errors.Is(err, fencedstore.ErrStaleOwner):
			cnt.StaleOwner++
		case errors.Is(err, fencedstore.ErrConflict):
			cnt.Conflict++
		case errors.Is(err, fencedstore.ErrExpired):
			cnt.Expired++
		case err != nil:
			cnt.Unknown++
			if cnt.FirstError == nil {
				cnt.FirstError = err
			}
			return
		case res.Outcome == fencedstore.Established:
			cnt.Established++
		default:
			cnt.Applied++
		}
		seen[res.Key] = res.Version
	}
	if client == 0 && w.Calls > 0 {
		// Every outcome at least once, whatever the interleaving: on a key
		// of its own, client 0 establishes, conflicts, publishes, is
		// refused as stale and as expired, and reads.
		key := "probe/client-0"
		tok := func() fencedstore.Token { g := clock.Add(1); return fencedstore.Token{Epoch: 1 + g/16, Seq: 1 + g%16} }
		first, never := tok(), uint64(1<<62)
		count(r.Establish(ctx, s, client, fencedstore.EstablishRequest{Key: key, Token: first, Attempt: "probe"}))
		count(r.Publish(ctx, s, client, fencedstore.PublishRequest{Key: key, Token: tok(), Attempt: "probe", Body: bodies[0], ExpectedVersion: &never}))
		count(r.Publish(ctx, s, client, fencedstore.PublishRequest{Key: key, Token: tok(), Attempt: "probe", Body: bodies[1]}))
		count(r.Publish(ctx, s, client, fencedstore.PublishRequest{Key: key, Token: first, Attempt: "probe", Body: bodies[2]}))
		count(r.Publish(ctx, s, client, fencedstore.PublishRequest{Key: key, Token: tok(), Attempt: "probe", Body: bodies[2], Expires: expiredLongAgo}))
		cnt.Gets++
		if _, err := r.Get(ctx, s, client, key); err != nil {
			cnt.Unknown++
			cnt.FirstError = err
		}
	}
	for i := 0; i < w.Calls && ctx.Err() == nil; i++ {
		key := w.Keys[rng.IntN(len(w.Keys))]
		g := clock.Add(1)
		if rng.IntN(3) == 0 {
			g -= min(g, uint64(rng.IntN(spread)))
		}
		tok := fencedstore.Token{Epoch: 1 + g/16, Seq: 1 + g%16}
		attempt := fmt.Sprintf("a%s", tok)
		if rng.IntN(5) == 0 {
			attempt = fmt.Sprintf("client%d", client)
		}
		var expires time.Time
		switch e := rng.IntN(10); {
		case e == 0:
			expires = expiredLongAgo
		case e < 3:
			expires = expiresFarAhead
		}
		switch p := rng.IntN(100); {
		case p < 25:
			count(r.Establish(ctx, s, client, fencedstore.EstablishRequest{Key: key, Token: tok, Attempt: attempt, Expires: expires}))
		case p < 80:
			req := fencedstore.PublishRequest{Key: key, Token: tok, Attempt: attempt, Body: bodies[rng.IntN(len(bodies))], Expires: expires}
			if rng.IntN(5) == 0 {
				v := seen[key]
				req.ExpectedVersion = &v
			}
			if last != nil && rng.IntN(10) == 0 {
				req = *last
			}
			last = &req
			count(r.Publish(ctx, s, client, req))
		default:
			cnt.Gets++
			obj, err := r.Get(ctx, s, client, key)
			switch {
			case err == nil:
				seen[key] = obj.Version
			case !errors.Is(err, fencedstore.ErrNotFound):
				cnt.Unknown++
				if cnt.FirstError == nil {
					cnt.FirstError = err
				}
			}
		}
	}
	return cnt
}
