package main

import "testing"

func TestProcsFor(t *testing.T) {
	for _, tc := range []struct {
		current int
		env     string
		want    int
	}{
		{1, "", minProcs},
		{2, "", minProcs},
		{minProcs, "", minProcs},
		{16, "", 16},
		{2, "2", 2}, // the operator's choice stands
		{1, "1", 1},
	} {
		if got := procsFor(tc.current, tc.env); got != tc.want {
			t.Errorf("procsFor(%d, %q) = %d, want %d", tc.current, tc.env, got, tc.want)
		}
	}
}
