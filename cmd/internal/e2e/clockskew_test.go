package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
)

// skewMetric reads one sample of a node's /metrics: the line that starts
// with series (name and labels as exposed).
func skewMetric(n *localcluster.Node, series string) (float64, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(n.URL() + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s in /metrics", n.Name, series)
}

// TestCluster_ClockSkewFlagged: a real three-server cluster where n3's
// wall clock runs 3 s ahead (a test build's clock-offset-ms fault). The
// others measure it over the internal API and flag it: the metric
// fencecron_clock_skew_seconds{peer="n3"} near +3 with the exceeded flag,
// an audit entry of kind clock_skew, and a warning on the dashboard; n1
// and n2 are not flagged to each other, and n3 sees them 3 s behind.
func TestCluster_ClockSkewFlagged(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 3,
		Env: map[string][]string{"n3": {"FENCECRON_FAULTS=clock-offset-ms=3000"}}})
	agree(t, c, 60*time.Second)
	n1, n2, n3 := c.Node("n1"), c.Node("n2"), c.Node("n3")
	near := func(n *localcluster.Node, peer string, want float64, exceeded float64) error {
		v, err := skewMetric(n, fmt.Sprintf(`fencecron_clock_skew_seconds{peer=%q}`, peer))
		if err != nil {
			return err
		}
		if v < want-0.4 || v > want+0.4 {
			return fmt.Errorf("%s sees %s's clock at %+.3fs, want %+.1fs", n.Name, peer, v, want)
		}
		x, err := skewMetric(n, fmt.Sprintf(`fencecron_clock_skew_exceeded{peer=%q}`, peer))
		if err != nil {
			return err
		}
		if x != exceeded {
			return fmt.Errorf("%s: %s exceeded = %v, want %v", n.Name, peer, x, exceeded)
		}
		return nil
	}
	err := localcluster.Until(90*time.Second, func() error {
		for _, check := range []error{
			near(n1, "n3", 3, 1), near(n2, "n3", 3, 1),
			near(n1, "n2", 0, 0), near(n2, "n1", 0, 0),
			near(n3, "n1", -3, 1),
		} {
			if check != nil {
				return check
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := skewMetric(n1, "fencecron_clock_skew_max_seconds"); err != nil || v != 0.5 {
		t.Errorf("threshold metric = %v, %v; want the default 0.5", v, err)
	}

	// The audit trail names n3, from n1 and from n2.
	err = localcluster.Until(30*time.Second, func() error {
		var out struct{ Events []jobs.Event }
		if err := n1.GetJSON("/api/v1/events?limit=1000", &out); err != nil {
			return err
		}
		from := map[string]bool{}
		for _, e := range out.Events {
			if e.Kind == jobs.EventClockSkew && strings.HasPrefix(e.Detail, "n3's clock is") && strings.Contains(e.Detail, "ahead of "+e.Node+"'s") {
				from[e.Node] = true
			}
		}
		if !from["n1"] || !from["n2"] {
			return fmt.Errorf("clock_skew entries about n3 from %v; want n1 and n2", from)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Every page of n1 warns.
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(n1.URL() + "/jobs")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `id="clock-skew"`) || !strings.Contains(string(body), "<b>n3</b>'s clock is ") || !strings.Contains(string(body), "s ahead of this node's") || strings.Contains(string(body), "<b>n2</b>'s clock") {
		t.Errorf("n1's jobs page does not warn of n3 (and only n3):\n%s", body)
	}
}
