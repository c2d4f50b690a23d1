package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// fencebench exports: what exporting the whole job set costs a node's
// memory. A `fencecron dev` node with an API token holds N jobs; once it
// has settled, C clients export the set at the same moment (GET
// /api/v1/jobset with the token), each until it has the whole answer (a
// 503 waits its Retry-After), while the node's VmRSS is sampled. Issue
// 30's bound is 2 × the idle RSS + 64 MiB.

// exportsToken is the API token of the measured node.
const exportsToken = "fencebench-exports-token-0123456789abcdef"

func runExports(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, c := benchFlags("exports", stderr)
	n := fs.Int("jobs", 100000, "jobs the node holds")
	clients := fs.Int("clients", 16, "clients exporting at once")
	settle := fs.Duration("settle", 10*time.Second, "how long after the set is applied to read the node's idle RSS")
	bin, dir, cleanup, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	defer cleanup()
	if *n < 1 || *n > jobs.MaxJobs || *clients < 1 || *clients > 256 {
		return fmt.Errorf("-jobs from 1 to %d, -clients from 1 to 256", jobs.MaxJobs)
	}
	bins, labels := c.binaries(bin)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "binary\tjobs\tclients\tanswer\tidle RSS\tmax RSS\tbound\twithin\texports took\t503s\t")
	for i, b := range bins {
		fmt.Fprintf(stderr, "measuring %d exports of %d jobs: %s\n", *clients, *n, labels[i])
		r, err := measureExports(ctx, b, filepath.Join(dir, fmt.Sprintf("exports-%d", i)), *n, *clients, *settle)
		if err != nil {
			return fmt.Errorf("%s: %w", labels[i], err)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%v\t%s\t%d\t\n", labels[i], *n, *clients, mib(r.answer), mib(r.idle), mib(r.max), mib(r.bound()), r.within(), secs(r.took), r.refused)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "answer: one export's bytes; idle RSS: VmRSS -settle after the set was applied; max RSS: the most VmRSS sampled (every 10 ms) while the clients exported;"+
		" bound: 2 × idle + 64 MiB (issue 30); exports took: from the first request to the last answer read; 503s: exports refused for now and asked again")
	return nil
}

// exportsResult is one binary's exports.
type exportsResult struct {
	idle, max, answer int64
	took              time.Duration
	refused           int
}

func (r exportsResult) bound() int64 { return 2*r.idle + 64<<20 }
func (r exportsResult) within() bool { return r.max <= r.bound() }

// exportsJobs writes n jobs as a dev node's -jobs file: each with a
// webhook, none firing (1 January only).
func exportsJobs(n int) []byte {
	var b bytes.Buffer
	b.WriteString("jobs:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: job-%06d\n    schedule: \"%d %d 1 1 *\"\n    command: [\"/bin/true\", \"--report\", \"%d\"]\n"+
			"    notify: [{on: [failed], webhook: \"https://hooks.example.com/services/%06d?key=k%06d\"}]\n", i, i%60, (i/60)%24, i, i, i)
	}
	return b.Bytes()
}

// measureExports starts a dev node holding n jobs, lets it settle, and
// has clients export the set at once.
func measureExports(ctx context.Context, bin, dir string, n, clients int, settle time.Duration) (exportsResult, error) {
	var r exportsResult
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	file := filepath.Join(dir, "jobs.yaml")
	if err := os.WriteFile(file, exportsJobs(n), 0o644); err != nil {
		return r, err
	}
	dev, addr, stop, err := startDev(bin, dir, "-jobs", file, "-api-token", exportsToken)
	if err != nil {
		return r, err
	}
	defer stop()
	base := "http://" + addr
	err = localcluster.UntilEvery(3*time.Minute, 200*time.Millisecond, func() error {
		var st wire.Status
		if err := getJSON(base+"/api/v1/status", &st); err != nil {
			return err
		}
		if st.Jobs.Count != n {
			return fmt.Errorf("the node holds %d jobs, want %d", st.Jobs.Count, n)
		}
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("dev node never held the set: %w", err)
	}
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(settle):
	}
	if r.idle, err = vmRSS(dev.Process.Pid); err != nil {
		return r, err
	}

	// The node's RSS, sampled until the exports end.
	done := make(chan struct{})
	sampled := make(chan int64, 1)
	go func() {
		most := r.idle
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if rss, err := vmRSS(dev.Process.Pid); err == nil {
				most = max(most, rss)
			}
			select {
			case <-done:
				sampled <- most
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	answers := make([]exportAnswer, clients)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = exportOnce(ctx, base+"/api/v1/jobset")
		}()
	}
	wg.Wait()
	r.took = time.Since(start)
	close(done)
	r.max = <-sampled

	for _, a := range answers {
		if a.err != nil {
			return r, a.err
		}
		if a.sum != answers[0].sum || a.size != answers[0].size {
			return r, errors.New("the exports differ")
		}
		r.refused += a.refused
	}
	r.answer = answers[0].size
	// What they got is the whole set (read once more, after the window).
	var set wire.JobSet
	if err := getJSONWith(base+"/api/v1/jobset", exportsToken, &set); err != nil {
		return r, err
	}
	if len(set.Jobs) != n {
		return r, fmt.Errorf("the export holds %d jobs, want %d", len(set.Jobs), n)
	}
	return r, nil
}

// exportAnswer is what one client got: the answer's size and hash, and
// how many times it was refused for now first.
type exportAnswer struct {
	size    int64
	sum     [sha256.Size]byte
	refused int
	err     error
}

// exportOnce exports the set with the token until it gets it, waiting
// out each 503's Retry-After, for at most 5 minutes and 1000 tries.
func exportOnce(ctx context.Context, url string) exportAnswer {
	var a exportAnswer
	deadline := time.Now().Add(5 * time.Minute)
	for try := 0; try < 1000 && time.Now().Before(deadline); try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			a.err = err
			return a
		}
		req.Header.Set("Authorization", "Bearer "+exportsToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			a.err = err
			return a
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			a.refused++
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			select {
			case <-ctx.Done():
				a.err = ctx.Err()
				return a
			case <-time.After(time.Duration(max(wait, 1)) * time.Second):
			}
			continue
		}
		h := sha256.New()
		a.size, err = io.Copy(h, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		a.err = err
		copy(a.sum[:], h.Sum(nil))
		return a
	}
	a.err = fmt.Errorf("GET %s: still refused after %d tries", url, a.refused)
	return a
}

func getJSON(url string, v any) error { return getJSONWith(url, "", v) }

// getJSONWith fetches url, with the API token if one is given, and
// decodes its JSON answer into v.
func getJSONWith(url, token string, v any) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
