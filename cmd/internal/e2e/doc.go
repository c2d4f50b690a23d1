// Package e2e holds fencecron's end-to-end tests: each starts real
// nodes (the fencecron binary built by cmd/internal/proctest, on loopback
// with free ports, alone or as a cluster through cmd/internal/localcluster)
// and drives them through their HTTP API and the command line, as an
// operator and a job would. It has no code of its own; run its tests with
// `go test ./cmd/internal/e2e` (-short skips them).
//
// The tests run in parallel (t.Parallel): most of their time is spent
// waiting for schedules, leases and elections, not computing. These run
// alone, before the others: the few that set environment variables; the
// demo's, which picks its own ports outside the tests' reservations
// (localcluster.FreePorts); and those whose claim a loaded machine could
// break without a fault of ours (no fire time lost across planned stops,
// lateness bounds), where a second cluster beside them would only add
// unplanned elections.
package e2e
