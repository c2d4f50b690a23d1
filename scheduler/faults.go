package scheduler

// FaultsBuildTag is the build tag that compiles fault injection in: the
// failures a test injects into one node through the FENCECRON_FAULTS
// environment variable (faults_on.go). A build without it (every release,
// `go build ./cmd/fencecron`) has none of them: Faults is then an empty
// type whose hooks do nothing and inline away (faults_off.go), and
// ParseFaults refuses a set FENCECRON_FAULTS instead of ignoring it.
// Helpers that build the binary for tests pass -tags fencecron_faults.
const FaultsBuildTag = "fencecron_faults"
