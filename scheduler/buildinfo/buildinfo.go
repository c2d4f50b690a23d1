// Package buildinfo says which fencecron this binary is: its version, the
// commit and date it was built from, the replicated log's format it reads
// and writes, and the Go that built it. `fencecron version`, the
// fencecron_build_info metric and the dashboard's footer all show this one
// answer, so a bug report, a scrape and a screenshot name the same build.
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// version, commit and date may be set at link time, for builds without
// the module's VCS stamp (GOFLAGS=-buildvcs=false, a tarball):
//
//	go build -ldflags "-X github.com/fencecron/fencecron/scheduler/buildinfo.version=v1.2.3
//	  -X github.com/fencecron/fencecron/scheduler/buildinfo.commit=abc123" ./cmd/fencecron
var version, commit, date string

// Unknown stands for a field the build did not record.
const Unknown = "unknown"

// Info describes one build.
type Info struct {
	Version    string // the module version (v1.2.3, a pseudo-version), or "(devel)"
	Commit     string // the VCS revision, shortened to 12 characters, + "-dirty" if modified
	Date       string // the commit's time, RFC 3339
	LogVersion int    // replicated.LogVersion: the newest log and snapshot format this binary reads, the one it writes
	GoVersion  string // the Go toolchain that built it
}

// Get is this binary's Info.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	return From(bi, ok)
}

// From is the Info of a build described by bi (ok false: none recorded),
// with the link-time values taking precedence.
func From(bi *debug.BuildInfo, ok bool) Info {
	in := Info{Version: "(devel)", Commit: Unknown, Date: Unknown, LogVersion: replicated.LogVersion, GoVersion: Unknown}
	if ok && bi != nil {
		if v := bi.Main.Version; v != "" {
			in.Version = v
		}
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Commit = s.Value
			case "vcs.time":
				in.Date = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if len(in.Commit) > 12 {
			in.Commit = in.Commit[:12]
		}
		if modified && in.Commit != Unknown {
			in.Commit += "-dirty"
		}
	}
	for _, o := range []struct {
		dst *string
		v   string
	}{{&in.Version, version}, {&in.Commit, commit}, {&in.Date, date}} {
		if v := strings.TrimSpace(o.v); v != "" {
			*o.dst = v
		}
	}
	return in
}

// String is the text `fencecron version` prints, one field a line.
func (in Info) String() string {
	return fmt.Sprintf("fencecron %s\ncommit:      %s\ndate:        %s\nlog version: %d (the replicated log's format this binary reads and writes)\ngo:          %s\n",
		in.Version, in.Commit, in.Date, in.LogVersion, in.GoVersion)
}

// Short is the one line the dashboard's footer shows.
func (in Info) Short() string {
	s := "fencecron " + in.Version
	if in.Commit != Unknown {
		s += " (" + in.Commit + ")"
	}
	return fmt.Sprintf("%s · log version %d · %s", s, in.LogVersion, in.GoVersion)
}
