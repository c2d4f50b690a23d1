// Package e2e holds fencecron's end-to-end tests: each starts real
// nodes (the fencecron binary built by cmd/internal/proctest, on loopback
// with free ports, alone or as a cluster through cmd/internal/localcluster)
// and drives them through their HTTP API and the command line, as an
// operator and a job would. It has no code of its own; run its tests with
// `go test ./cmd/internal/e2e` (-short skips them).
package e2e
