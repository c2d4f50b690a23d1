package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/fencedstore"
)

func TestMain(m *testing.M) {
	// The nodes and commands the tests start inherit this environment; an
	// operator's settings would point them elsewhere. Tests that need one
	// pass it to the process (proctest.StartEnv, cliEnv), which lets them
	// run in parallel.
	for _, k := range operatorEnv {
		os.Unsetenv(k)
	}
	// Most of a test's time is spent waiting for schedules, leases and
	// elections, not computing: run more of them at once than there are
	// cores, unless -parallel says otherwise.
	flag.Parse()
	parallel := false
	flag.Visit(func(f *flag.Flag) { parallel = parallel || f.Name == "test.parallel" })
	if !parallel {
		flag.Set("test.parallel", strconv.Itoa(testParallel))
	}
	code := m.Run()
	proctest.Cleanup()
	os.Exit(code)
}

// testParallel is how many tests run at once by default.
const testParallel = 4

// operatorEnv is what an operator may have set for fencecron's commands,
// nodes and example configs.
var operatorEnv = []string{
	"FENCECRON_ADDR", "FENCECRON_API_TOKEN", "FENCECRON_CA", "FENCECRON_INSECURE",
	"FENCECRON_STORE", "FENCECRON_STORE_CA", "FENCECRON_TOKEN", "FENCECRON_SECRET",
	"FENCECRON_FAULTS", "FENCECRON_PORT_PREFIX", "FENCECRON_CLUSTER_DIR",
}

// Exit statuses of `fencecron publish` and `fencecron get` (their usage
// lists them; scripts rely on them).
const (
	exitError      = 1 // anything else: bad input, bad token, unreachable store
	exitUsage      = 2
	exitStaleOwner = 3 // the store holds a newer token; nothing was written
	exitConflict   = 4 // If-Match differs from the key's version; nothing was written
	exitNotFound   = 5 // get: no such key
	exitExpired    = 6 // the token's expiry has passed; nothing was written
)

// demoMarker is the environment variable `fencecron demo` sets in every
// process of its cluster (KEY=its directory), by which it finds them.
const demoMarker = "FENCECRON_DEMO"

// secretFile is where `fencecron dev` keeps the cluster secret it
// generated, in its data directory.
const secretFile = "cluster.secret"

// cli runs a fencecron command with the built binary, with the test's
// environment, and returns what it wrote (stdout, then stderr). If it
// failed, the error is what it said ("fencecron: ERROR" on stderr) and
// carries its exit status (exitCodeOf).
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return cliEnv(t, nil, args...)
}

// cliEnv is cli with env ("KEY=value") added to the command's environment.
func cliEnv(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	return cliWithin(t, 30*time.Second, env, args...)
}

// cliWithin is cliEnv for a command given up to d: an apply of 100,000
// jobs reads and sends some 10 MB, which on a busy CI machine running
// the race-detected suites beside it takes longer than a look-up.
func cliWithin(t *testing.T, d time.Duration, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, proctest.Binary(t), args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = &cliError{code: ee.ExitCode(), msg: said(errOut.String(), ee)}
	}
	return out.String() + errOut.String(), err
}

// cliError is a command's failure: what it said, and its exit status.
type cliError struct {
	code int
	msg  string
}

func (e *cliError) Error() string { return e.msg }

// said is the error a failed command printed last ("fencecron: ..."),
// or its exit status if it printed none.
func said(stderr string, ee *exec.ExitError) string {
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if msg, ok := strings.CutPrefix(lines[i], "fencecron: "); ok {
			return msg
		}
	}
	return ee.Error()
}

// exitCodeOf is the exit status of a command cli ran: 0 for no error.
func exitCodeOf(err error) int {
	var ce *cliError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ce):
		return ce.code
	}
	return exitError
}

// mustSign signs a token of job "job" that expires in an hour.
func mustSign(t *testing.T, sg *fencedstore.Signer, epoch, seq uint64, prefix string) string {
	t.Helper()
	return mustSignExpiring(t, sg, epoch, seq, prefix, time.Now().Add(time.Hour))
}

func mustSignExpiring(t *testing.T, sg *fencedstore.Signer, epoch, seq uint64, prefix string, expires time.Time) string {
	t.Helper()
	text, err := sg.Sign(fencedstore.SignedToken{Token: fencedstore.Token{Epoch: epoch, Seq: seq}, Attempt: fmt.Sprintf("job@t.%d", seq), Scope: fencedstore.Scope{Job: "job", Prefix: prefix}, Expires: expires})
	if err != nil {
		t.Fatal(err)
	}
	return text
}
