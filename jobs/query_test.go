package jobs

import "testing"

func TestQuery_Matches(t *testing.T) {
	s := Spec{Name: "Report-Monthly", Target: map[string]string{"zone": "A"}}
	never := func() (State, bool) { return "", false }
	failed := func() (State, bool) { return Failed, true }
	for _, c := range []struct {
		q      Query
		paused bool
		last   func() (State, bool)
		want   bool
	}{
		{Query{}, false, never, true},
		{Query{Text: "report"}, false, never, true},
		{Query{Text: " MONTHLY "}, false, never, true},
		{Query{Text: "zone=a"}, false, never, true},
		{Query{Text: "zone=b"}, false, never, false},
		{Query{Text: "daily"}, false, never, false},
		{Query{Paused: true}, false, never, false},
		{Query{Paused: true}, true, never, true},
		{Query{State: NeverRan}, false, never, true},
		{Query{State: NeverRan}, false, failed, false},
		{Query{State: Failed}, false, failed, true},
		{Query{State: Succeeded}, false, failed, false},
		{Query{State: Failed}, false, never, false},
	} {
		if got := c.q.Matches(&s, c.paused, c.last, c.q.SearchText()); got != c.want {
			t.Errorf("%+v (paused %v) matches = %v, want %v", c.q, c.paused, got, c.want)
		}
	}
}
