package batchgrant

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	m := func(job, scope, output string) Member {
		return Member{Job: job, Scope: scope, Output: output}
	}
	for _, tc := range []struct {
		name    string
		members []Member
		refused []bool
	}{
		{"disjoint jobs share the entry",
			[]Member{m("a", "a/", ""), m("b", "b/", ""), m("c", "reports/c/", "reports/c/x.csv")},
			[]bool{false, false, false}},
		{"the same job twice: the second waits",
			[]Member{m("a", "a/", ""), m("a", "a/", "")},
			[]bool{false, true}},
		{"equal scopes",
			[]Member{m("a", "reports/", "reports/a.csv"), m("b", "reports/", "reports/b.csv")},
			[]bool{false, true}},
		{"one scope inside another, either order",
			[]Member{m("a", "reports/", ""), m("b", "reports/daily/", ""), m("c", "x/y/", ""), m("d", "x/", "")},
			[]bool{false, true, false, true}},
		{"outputs outside their scopes that meet",
			[]Member{m("a", "a/", "out.csv"), m("b", "b/", "out.csv")},
			[]bool{false, true}},
		{"an output inside another's scope",
			[]Member{m("a", "a/", "b/x.csv"), m("b", "b/", "")},
			[]bool{false, true}},
		{"only kept members count: a refused one blocks nobody",
			[]Member{m("a", "a/", ""), m("b", "a/b/", "z/1"), m("c", "z/", "")},
			[]bool{false, true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.members)
			for i, err := range got {
				if refused := err != nil; refused != tc.refused[i] {
					t.Errorf("member %d (%s): err = %v, want refused %v", i, tc.members[i].Job, err, tc.refused[i])
				}
				if err != nil && !errors.Is(err, ErrOverlap) {
					t.Errorf("member %d: err = %v, want ErrOverlap", i, err)
				}
			}
		})
	}
}

// Decide's index answers as comparing every member with every kept
// one did (pairwiseDecide, the rule as first written): the same members
// refused, with the same first kept member named, over random batches
// whose jobs, scopes and outputs often meet.
func TestDecide_SameAsPairwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 32))
	word := func() string {
		const parts = "abc"
		var b strings.Builder
		for range rng.IntN(4) {
			b.WriteByte(parts[rng.IntN(len(parts))])
			if rng.IntN(2) == 0 {
				b.WriteByte('/')
			}
		}
		return b.String()
	}
	refusals := 0
	for range 2000 {
		members := make([]Member, rng.IntN(12)+1)
		for i := range members {
			members[i] = Member{Job: fmt.Sprint("j", rng.IntN(20)), Scope: word(), Output: word()}
		}
		got, want := Decide(members), pairwiseDecide(members)
		for i := range members {
			if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
				t.Fatalf("batch %+v, member %d: got %v, want %v", members, i, got[i], want[i])
			}
			if want[i] != nil {
				refusals++
			}
		}
	}
	if refusals == 0 {
		t.Fatal("no batch refused a member: the cases test nothing")
	}
}

func pairwiseDecide(members []Member) []error {
	out := make([]error, len(members))
	var kept []Member
	for i, m := range members {
		for _, k := range kept {
			if m.Job == k.Job || keysMeet(m, k) {
				out[i] = fmt.Errorf("grant of %s: %w (%s)", m.Job, ErrOverlap, k.Job)
				break
			}
		}
		if out[i] == nil {
			kept = append(kept, m)
		}
	}
	return out
}
