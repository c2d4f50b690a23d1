package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
)

// The leader's hash of a set changed a little, from the states kept of
// the set before, is jobs.HashSpecs of the new set, whatever the change:
// jobs edited in place, added (first, last, between), removed, none, or
// a set that ends at a window's edge. It hashes again only from the
// window of the first job that changed in name order.
func TestSetHasher_AsHashSpecs(t *testing.T) {
	const window = 4
	h := setHasher{window: window}
	// The set as the FSM holds it: specs by address, and their positions
	// in name order.
	set := jobs.Addrs(jobstest.Daily(30))
	sorted := jobs.NameOrder(len(set), func(i int) *jobs.Spec { return set[i] })
	hash := h.hashSet(jobs.Values(set))
	if want := jobs.HashSpecs(jobs.Values(set)); hash != want || h.hashed != len(set) {
		t.Fatalf("whole set: %s, %d jobs hashed; want %s, %d", hash, h.hashed, want, len(set))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		next := slices.Clone(set)
		first := len(set) // the first position in name order that changes
		switch op := r.IntN(5); {
		case op == 0 && len(next) > 0: // edit one in place
			i := r.IntN(len(next))
			edited := *next[i]
			edited.Command = []string{"/bin/echo", fmt.Sprint(round)}
			next[i] = &edited
			first = slices.Index(sorted, i)
		case op == 1 && len(next) > 0: // remove one
			i := r.IntN(len(next))
			first = slices.Index(sorted, i)
			next = slices.Delete(next, i, i+1)
		case op == 2: // add one, its name anywhere in the order
			s := jobstest.EveryMinute(fmt.Sprintf("job-%06d-%d", r.IntN(40), round), "true")
			next = append(next, &s)
			first = len(set)
			for k, i := range sorted {
				if set[i].Name > s.Name {
					first = k
					break
				}
			}
		case op == 3: // nothing
		default: // down to a window's edge, or up past it
			n := (len(next)/window + r.IntN(2)) * window
			for len(next) > n {
				next = next[:len(next)-1]
			}
			for len(next) < n {
				s := jobstest.EveryMinute(fmt.Sprintf("zz-%d-%d", round, len(next)), "true")
				next = append(next, &s)
			}
			first = 0 // not asserted
		}
		order := jobs.NameOrder(len(next), func(i int) *jobs.Spec { return next[i] })
		got := h.hash(len(next), func(k int) *jobs.Spec { return next[order[k]] }, hash, func(k int) *jobs.Spec { return set[sorted[k]] })
		if want := jobs.HashSpecs(jobs.Values(next)); got != want {
			t.Fatalf("round %d: %s; want %s", round, got, want)
		}
		if kept := first / window * window; first > 0 && kept < len(next) && h.hashed > len(next)-kept {
			t.Fatalf("round %d: the first change at %d of %d in name order, and %d jobs hashed; want at most %d", round, first, len(next), h.hashed, len(next)-kept)
		}
		set, sorted, hash = next, order, got
	}
	// No set (a request's "jobs": null) and an empty one hash as
	// jobs.HashSpecs hashes them.
	if got, want := h.hashSet(nil), jobs.HashSpecs(nil); got != want {
		t.Errorf("no set: %s; want %s", got, want)
	}
	if got, want := h.hashSet([]jobs.Spec{}), jobs.HashSpecs([]jobs.Spec{}); got != want || got == jobs.HashSpecs(nil) {
		t.Errorf("an empty set: %s; want %s, not the hash of no set", got, want)
	}
	set, sorted = jobs.Addrs(jobstest.Daily(9)), []int{0, 1, 2, 3, 4, 5, 6, 7, 8}
	hash = h.hashSet(jobs.Values(set))
	// A base other than the set the states are of: hashed whole.
	if got := h.hash(len(set), func(k int) *jobs.Spec { return set[sorted[k]] }, "other", func(k int) *jobs.Spec { return set[sorted[k]] }); got != hash || h.hashed != len(set) {
		t.Errorf("against another base: %s, %d jobs hashed; want %s, %d", got, h.hashed, hash, len(set))
	}
}
