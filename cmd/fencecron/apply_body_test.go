package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// The body `fencecron apply` streams is what json.Marshal makes of the
// request, for a set spanning several encoding windows and for none.
func TestWriteJobSetRequest(t *testing.T) {
	big := make([]jobs.Spec, 10000)
	for i := range big {
		big[i] = jobs.Spec{Name: fmt.Sprintf("job-%d", i), Schedules: []string{"@daily"}, Command: []string{"/bin/echo", "<&>"}}
		big[i].Normalize()
	}
	for name, specs := range map[string][]jobs.Spec{"nil": nil, "empty": {}, "big": big} {
		want, err := json.Marshal(wire.JobSetRequest{Source: `apply "x" from <h>`, Jobs: specs})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := writeJobSetRequest(&b, `apply "x" from <h>`, specs); err != nil {
			t.Fatal(err)
		}
		if got := b.String(); got != string(want) {
			t.Errorf("%s: body differs from json.Marshal of the request:\n%.200s\nwant\n%.200s", name, got, want)
		}
	}
}
