// Package e2e holds fencecron's end-to-end tests: each starts real
// nodes (the fencecron binary built by cmd/internal/proctest, on loopback
// with free ports, alone or as a cluster through cmd/internal/localcluster)
// and drives them through their HTTP API and the command line, as an
// operator and a job would. It has no code of its own; run its tests with
// `go test ./cmd/internal/e2e` (-short skips them).
//
// The tests run in parallel (t.Parallel), four at a time unless -parallel
// says otherwise: most of their time is spent waiting for schedules,
// leases and elections, not computing. A test that needs an environment
// variable hands it to the processes it starts (proctest.StartEnv,
// cliEnv); TestMain clears an operator's FENCECRON_* settings so that
// none leaks in. The nodes are the test build without the race detector
// (proctest.Binary), except in the tests that drive a node's concurrent
// paths through kills, pauses and hand-overs (startRaceCluster).
//
// A few run alone, before the others: those whose claim is a bound in
// time (how late a run granted ahead starts after its holder dies, no
// fire time lost across planned stops, the lateness histograms), where a
// second cluster beside them would only add unplanned elections.
package e2e
