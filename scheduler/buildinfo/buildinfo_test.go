package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

func TestFrom(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "31be659a0c1d2e3f4a5b6c7d8e9f00112233445566"},
		{Key: "vcs.time", Value: "2026-12-02T15:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	got := From(bi, true)
	want := Info{Version: "v1.4.0", Commit: "31be659a0c1d-dirty", Date: "2026-12-02T15:00:00Z", LogVersion: replicated.LogVersion, GoVersion: "go1.26.8"}
	if got != want {
		t.Errorf("From = %+v, want %+v", got, want)
	}
	for _, line := range []string{"fencecron v1.4.0\n", "commit:      31be659a0c1d-dirty\n", "date:        2026-12-02T15:00:00Z\n", "go:          go1.26.8\n"} {
		if !strings.Contains(got.String(), line) {
			t.Errorf("String() lacks %q:\n%s", line, got)
		}
	}
	if !strings.Contains(got.String(), fmt.Sprintf("log version: %d ", replicated.LogVersion)) {
		t.Errorf("String() lacks the log version:\n%s", got)
	}
}

func TestFrom_noBuildInfo(t *testing.T) {
	got := From(nil, false)
	if got.Version != "(devel)" || got.Commit != Unknown || got.Date != Unknown || got.LogVersion != replicated.LogVersion {
		t.Errorf("From(nil) = %+v", got)
	}
}

func TestFrom_linkTimeValuesWin(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v9.9.9", "abc"
	got := From(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true)
	if got.Version != "v9.9.9" || got.Commit != "abc" {
		t.Errorf("From with -X values = %+v", got)
	}
	if !strings.Contains(got.Short(), "fencecron v9.9.9 (abc) · log version") {
		t.Errorf("Short() = %q", got.Short())
	}
}
