package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// `fencecron version` and `fencecron -version` name the build: what a bug
// report needs, and the log version that says which nodes can share a
// cluster.
func TestRun_Version(t *testing.T) {
	for _, arg := range []string{"version", "-version", "--version"} {
		t.Run(arg, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := run(context.Background(), []string{arg}, &out, &errOut); err != nil {
				t.Fatalf("fencecron %s: %v\n%s", arg, err, errOut.String())
			}
			for _, want := range []string{"fencecron ", "\ncommit: ", "\ndate: ", fmt.Sprintf("\nlog version: %d ", replicated.LogVersion), "\ngo:          " + runtime.Version() + "\n"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("fencecron %s printed no %q:\n%s", arg, want, out.String())
				}
			}
		})
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"version", "extra"}, &out, &errOut); exitCodeOf(err) == 0 {
		t.Errorf("fencecron version extra: %v, want a usage error", err)
	}
}
