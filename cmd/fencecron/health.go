package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// healthTimeout bounds one health check: a container engine runs it every
// few seconds and treats a hang like a failure anyway.
const healthTimeout = 5 * time.Second

// runHealth asks a node whether it is ready (GET /readyz) or, with -live,
// alive (GET /healthz), and exits 0 if so, 1 otherwise. It exists for
// images without curl: the container's HEALTHCHECK runs the binary itself.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var live bool
	c, _, err := clientFlags("health", args, stdout, stderr, 0, "", func(fs *flag.FlagSet) {
		fs.BoolVar(&live, "live", false, "check liveness (/healthz: the process answers) instead of readiness (/readyz: a member of a cluster with a leader)")
	})
	if err != nil {
		return err
	}
	path := "/readyz"
	if live {
		path = "/healthz"
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "fencecron health: %v\n", reachErr(err))
		return exitCode(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "fencecron health: %s %s: %s\n", path, resp.Status, msg)
		return exitCode(1)
	}
	fmt.Fprintln(stdout, msg)
	return nil
}
