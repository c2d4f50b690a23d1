// Package faults is the fault injection of test builds: the failures a
// test asks one node for through FENCECRON_FAULTS, compiled in only with
// the build tag below, so that no release binary carries them.
package faults

// BuildTag is the build tag that compiles fault injection in: the
// failures a test injects into one node through the FENCECRON_FAULTS
// environment variable (on.go). A build without it (every release,
// `go build ./cmd/fencecron`) has none of them: Faults is then an empty
// type whose hooks do nothing and inline away (off.go), and
// ParseFaults refuses a set FENCECRON_FAULTS instead of ignoring it.
// Helpers that build the binary for tests pass -tags fencecron_faults.
const BuildTag = "fencecron_faults"

// Tuning is what a test build may shrink to make a test fast, through
// FENCECRON_FAULTS like the faults (hot-runs=, hot-events=,
// raft-snapshot-threshold=, raft-trailing-logs=,
// raft-snapshot-interval-ms=): the replicated state's bounds (the same on
// every node of a cluster: trimming is part of applying) and Raft's
// snapshot rhythm, so that history leaves the hot window and a lagging
// server installs a snapshot within a test's minute. Zero fields leave
// the defaults; a release build always returns the zero Tuning.
type Tuning struct {
	HotRuns, HotEvents              int
	SnapshotThreshold, TrailingLogs uint64
	SnapshotIntervalMS              int
}
