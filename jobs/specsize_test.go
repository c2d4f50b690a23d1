package jobs

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestSpecBytesAtMost: the bound that spares validation an encoding of
// each spec is never below the encoding's size, for specs whose every
// string needs the longest escapes, and for specs of many empty parts.
func TestSpecBytesAtMost(t *testing.T) {
	// The bound walks these types' strings by name: a field added, or
	// one whose type changes, must be counted there before this list
	// changes.
	for _, tc := range []struct {
		typ    reflect.Type
		fields string
	}{
		{reflect.TypeFor[Spec](), "Name string, Namespace string, Schedules []string, Timezone string, Command []string, Shell string, Env map[string]string, Dir string, Output string, Timeout jobs.Duration, LeaseTTL jobs.Duration, Retries int, Backoff jobs.Duration, Overlap string, Misfire string, CatchupWindow jobs.Duration, Target map[string]string, MaxOutputBytes int64, Paused bool, Jitter jobs.Duration, DST jobs.DSTPolicy, History jobs.History, Notify []jobs.Notify, After []string, HTTP *jobs.HTTP, Group string, GroupLimits *jobs.Group"},
		{reflect.TypeFor[HTTP](), "URL string, Method string, Headers map[string]string, Body string, ExpectStatus []int, CAFile string"},
		{reflect.TypeFor[Notify](), "On []string, Webhook string, Slack string, Email []string"},
		{reflect.TypeFor[Group](), "Name string, Namespace string, MaxRunning int, MaxWaiting int"},
		{reflect.TypeFor[DSTPolicy](), "Spring string, Fall string"},
		{reflect.TypeFor[History](), "Runs int, MaxAge jobs.Duration"},
	} {
		if got := fieldTypes(tc.typ); got != tc.fields {
			t.Errorf("%s is now\n\t%s\nnot\n\t%s\ncount what changed in specBytesAtMost, then here", tc.typ, got, tc.fields)
		}
	}

	worst := func(n int) string { return strings.Repeat("<\x00\xff\u2028\"\\&", n) } // each escaped at its longest
	many := func(n int, s string) []string { return slices.Repeat([]string{s}, n) }
	pairs := func(n int, v string) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprint(i)] = v
		}
		return m
	}
	const minDur = Duration(math.MinInt64)
	full := Spec{
		Name: worst(3), Namespace: worst(2), Schedules: many(5, worst(2)), Timezone: worst(1),
		Command: many(7, worst(4)), Shell: worst(50), Env: pairs(9, worst(2)), Dir: worst(1), Output: worst(1),
		Timeout: minDur, LeaseTTL: minDur, Retries: math.MinInt, Backoff: minDur, Overlap: worst(1), Misfire: worst(1),
		CatchupWindow: minDur, Target: pairs(3, worst(1)), MaxOutputBytes: math.MinInt64, Paused: true, Jitter: minDur,
		DST: DSTPolicy{Spring: worst(1), Fall: worst(1)}, History: History{Runs: math.MinInt, MaxAge: minDur},
		Notify: []Notify{{On: many(3, worst(1)), Webhook: worst(2), Slack: worst(2), Email: many(2, worst(1))}},
		After:  many(4, worst(1)),
		HTTP: &HTTP{URL: worst(5), Method: worst(1), Headers: pairs(4, worst(2)), Body: worst(30),
			ExpectStatus: slices.Repeat([]int{math.MinInt}, 10), CAFile: worst(1)},
		Group: worst(1), GroupLimits: &Group{Name: worst(1), Namespace: worst(1), MaxRunning: math.MinInt, MaxWaiting: math.MinInt},
	}
	cases := map[string]*Spec{
		"empty":                {},
		"every string escaped": &full,
		"empty schedules":      {Schedules: many(5000, "")},
		"empty env":            {Env: pairs(5000, "")},
		"empty notifications":  {Notify: make([]Notify, 5000)},
		"status codes":         {HTTP: &HTTP{ExpectStatus: slices.Repeat([]int{math.MinInt}, 5000)}},
		"empty headers":        {HTTP: &HTTP{Headers: pairs(5000, "")}},
		"empty group":          {GroupLimits: &Group{}},
	}
	for name, s := range cases {
		if got, bound := SpecBytes(s), specBytesAtMost(s); got > bound {
			t.Errorf("%s: %d bytes of JSON, above the bound %d", name, got, bound)
		}
	}

	// A spec over MaxSpecBytes is still refused, with its size.
	big := Spec{Name: "big", Schedules: []string{"@daily"}, Shell: strings.Repeat("<", MaxSpecBytes/6+1)}
	err := ValidateEach([]Spec{big}, Limits{}, nil)[0]
	if err == nil || !strings.Contains(err.Error(), "one job's spec is at most 256 KiB") {
		t.Errorf("a spec of %d bytes of JSON: %v, want refused for its size", SpecBytes(&big), err)
	}
}

// fieldTypes lists t's fields as "Name type, ...".
func fieldTypes(t reflect.Type) string {
	var fs []string
	for f := range t.Fields() {
		fs = append(fs, f.Name+" "+f.Type.String())
	}
	return strings.Join(fs, ", ")
}
