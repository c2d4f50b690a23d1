package web

import (
	"encoding/xml"
	"fmt"
	"html"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/buildinfo"
	"github.com/fencecron/fencecron/web/pages"
)

// get fetches path from the fixture and returns status, content type and body.
func (f *fixture) get(t testing.TB, path string, header ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.http.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := f.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// Every page renders, with the facts it exists to show (golden fragments).
func TestServer_Pages(t *testing.T) {
	f := newFixture(t)
	f.srv.Metrics.StoreDecided(fencedstore.StaleOwner)
	tests := []struct {
		path string
		want []string
		not  []string
	}{
		{"/", []string{
			`data-outcome="applied">applied <b>0</b>`, `data-outcome="stale_owner">stale_owner <b>1</b>`, `data-outcome="expired">expired <b>0</b>`,
			`<title>Overview · fencecron · n2</title>`,
			`data-member="w1"`, `<span class="gossip gossip-suspect">suspect</span>`, `<span class="gossip gossip-dead">dead</span>`,
			`<span class="tag">zone=a</span>`, `<span class="tag warn">drifted</span>`, `<span class="tag leader">leader</span>`,
			`<div class="num" id="card-epoch">4</div>`, `<div class="num" id="card-stale">1</div><div>stale writes refused</div>`,
			`<div class="num">1</div><div>leases expired</div>`, `<div class="num">1</div><div>failovers (leader changes)</div>`,
			`data-state="succeeded">succeeded <b>1</b>`, `data-state="failed">failed <b>1</b>`,
			`<b>epoch 4</b>`,
		}, nil},
		{"/jobs", []string{
			`data-job="report"`, `<code>0 0 9 1 * *</code><div class="words">at 09:00, on day 1 of the month</div>`,
			`<code>@every 30s</code><div class="words">every 30 seconds</div>`,
			`<td>Europe/Berlin</td>`, `2026-09-01 09:00:00 CEST`,
			`<span class="tag warn">paused</span>`,
			`action="/api/v1/jobs/report/trigger"`, `data-action="resume" data-job="heartbeat"`, `data-action="pause" data-job="report"`,
		}, nil},
		{"/jobs/report", []string{
			`<h1>Job report</h1>`, `data-attempt="report@20260801T090000Z.1"`, `data-attempt="report@20260801T090000Z.2"`,
			`<code class="token">3.10</code>`, `<code class="token">4.15</code>`, `title="the leader took this attempt's lease away">expired</span>`,
			`<span class="outcome outcome-stale_owner">stale_owner</span>`, `<a href="/store/reports/2026-07.csv">reports/2026-07.csv</a>`,
			`<svg xmlns="http://www.w3.org/2000/svg" class="timeline"`, `<td title="from the process's exec to its reaped exit, timed on w2">2s</td>`,
		}, nil},
		{"/jobs/heartbeat", []string{`<summary>stderr tail</summary><pre>disk &lt;full&gt;`, `<td>1</td>`, `exit code 1`, `paused`}, nil},
		{"/store", []string{`<a href="/store/reports/2026-07.csv">reports/2026-07.csv</a>`, `<td>v1</td>`, `<code class="token">4.15</code>`}, nil},
		{"/store?prefix=nothing/", []string{`no keys under nothing/`}, []string{`data-key=`}},
		{"/store/reports/2026-07.csv", []string{
			`<h1>Key <code>reports/2026-07.csv</code></h1>`,
			`<tr class="decision outcome-stale_owner refused">`, `<b>refused: 3.10 &lt; 4.15</b>`,
			`<b>1</b> stale write refused on this key`, `month,total
2026-07,&lt;42&gt;`, `class="mark mark-refused"`,
		}, nil},
		{"/events", []string{`<tr class="event kind-elected" data-seq="7">`, `n2 leads in epoch 4`, `kind-fenced`, `lease not renewed`}, nil},
		{"/events?kind=elected", []string{`data-seq="7"`, `data-seq="1"`}, []string{`kind-fenced" data-seq`}},
		{"/events?job=heartbeat", []string{`data-seq="3"`}, []string{`data-seq="7"`}},
		{"/timeline", []string{`<option selected>report</option>`, `job report: the last run`, `href="/timeline.svg"`}, nil},
		{"/timeline?key=reports/2026-07.csv", []string{`key reports/2026-07.csv`, `data-token="4.15"`}, nil},
		{"/login", []string{`there is nothing to log in to`}, []string{`type="password"`}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, ct, body := f.get(t, tt.path)
			if code != http.StatusOK || ct != "text/html; charset=utf-8" {
				t.Fatalf("GET %s = %d %s\n%s", tt.path, code, ct, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s lacks %q", tt.path, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(body, n) {
					t.Errorf("GET %s has %q", tt.path, n)
				}
			}
			if !strings.Contains(body, `<script src="/static/app.js" defer></script>`) || !strings.Contains(body, `</html>`) {
				t.Errorf("GET %s is not a whole page", tt.path)
			}
			// Every page's footer names the build, as `fencecron version` does.
			if bi := buildinfo.Get(); !strings.Contains(body, `<footer class="build muted" id="build">fencecron `+html.EscapeString(bi.Version)) || !strings.Contains(body, fmt.Sprintf("log version %d", bi.LogVersion)) {
				t.Errorf("GET %s: the footer lacks the version %q", tt.path, bi.Short())
			}
		})
	}
}

// A young cluster's counters show as zeros, not blanks.
func TestServer_OverviewZeroCounters(t *testing.T) {
	f := newFixture(t)
	f.state.counters = map[string]uint64{"grants": 2}
	_, _, body := f.get(t, "/")
	for _, w := range []string{`<div class="num" id="card-stale">0</div>`, `<div class="num">0</div><div>leases expired</div>`, `SUSPECT 0 · LOST 0`} {
		if !strings.Contains(body, w) {
			t.Errorf("overview lacks %q", w)
		}
	}
}

// A live refresh gets only the page's main content.
func TestServer_PageFragment(t *testing.T) {
	f := newFixture(t)
	code, _, body := f.get(t, "/jobs", pages.FragmentHeader, "main")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if strings.Contains(body, "<html") || strings.Contains(body, "<header>") || !strings.HasPrefix(strings.TrimSpace(body), "<h1>Jobs</h1>") {
		t.Errorf("fragment is not just main:\n%.300s", body)
	}
}

// Bad page requests get clear 4xx pages.
func TestServer_PageErrors(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		path string
		code int
		msg  string
	}{
		{"/jobs/nope", 404, `job &#34;nope&#34;: not found`},
		{"/events?kind=bogus", 400, `kind &#34;bogus&#34;: want one of elected`},
		{"/timeline?runs=0", 400, `runs must be a number from 1 to 200, got &#34;0&#34;`},
		{"/timeline?job=report&key=reports/x", 400, `ask for a job or a key, not both`},
		{"/timeline?job=nope", 404, `job &#34;nope&#34;: not found`},
		{"/timeline?key=../x", 400, `key &#34;../x&#34;`},
		{"/store/reports/none.csv", 404, `history of reports/none.csv: key not found`},
		{"/no/such/page", 404, `GET /no/such/page: not found`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, ct, body := f.get(t, tt.path)
			if code != tt.code || !strings.HasPrefix(ct, "text/html") {
				t.Errorf("GET %s = %d %s, want %d html", tt.path, code, ct, tt.code)
			}
			if !strings.Contains(body, tt.msg) {
				t.Errorf("GET %s lacks %q:\n%s", tt.path, tt.msg, body)
			}
		})
	}
}

// The picture stands alone as well-formed SVG.
func TestServer_TimelineSVG(t *testing.T) {
	f := newFixture(t)
	code, ct, body := f.get(t, "/timeline.svg?job=report")
	if code != http.StatusOK || ct != "image/svg+xml" {
		t.Fatalf("status %d %s", code, ct)
	}
	tl := parseSVG(t, body)
	if got := len(tl.find("rect", "band")); got != 2 {
		t.Errorf("%d epoch bands, want 2", got)
	}
	if code, _, _ := f.get(t, "/timeline.svg?runs=x"); code != http.StatusBadRequest {
		t.Errorf("bad runs: status %d, want 400", code)
	}
}

// svgNode is a parsed SVG element.
type svgNode struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Children []svgNode  `xml:",any"`
	Text     string     `xml:",chardata"`
}

func (n svgNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// find returns the elements named tag (any tag if "") whose class list
// has class, depth first.
func (n svgNode) find(tag, class string) []svgNode {
	var out []svgNode
	var walk func(svgNode)
	walk = func(m svgNode) {
		if (tag == "" || m.XMLName.Local == tag) && (class == "" || hasClass(m.attr("class"), class)) {
			out = append(out, m)
		}
		for _, c := range m.Children {
			walk(c)
		}
	}
	walk(n)
	return out
}

func hasClass(list, class string) bool {
	for _, c := range strings.Fields(list) {
		if c == class {
			return true
		}
	}
	return false
}

func parseSVG(t testing.TB, s string) svgNode {
	t.Helper()
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:]
	}
	if i := strings.LastIndex(s, "</svg>"); i >= 0 {
		s = s[:i+len("</svg>")]
	}
	var n svgNode
	if err := xml.Unmarshal([]byte(s), &n); err != nil {
		t.Fatalf("not well-formed SVG: %v\n%.500s", err, s)
	}
	return n
}

// The job page pages through the run history with older and newer links.
func TestServer_JobPagePages(t *testing.T) {
	f := newFixture(t)
	f.state.mu.Lock()
	f.state.runs = nil
	for i := range 120 {
		at := at(-30 * (i + 1))
		id := jobs.RunID("heartbeat", at)
		f.state.runs = append(f.state.runs, jobs.Run{ID: id, Job: "heartbeat", ScheduledAt: at, State: jobs.Succeeded})
	}
	f.state.mu.Unlock()
	link := regexp.MustCompile(`<a href="([^"]+)" rel="(prev|next)">`)
	links := func(body string) map[string]string {
		out := map[string]string{}
		for _, m := range link.FindAllStringSubmatch(body, -1) {
			out[m[2]] = html.UnescapeString(m[1])
		}
		return out
	}
	seen := map[string]int{}
	count := func(body string) {
		for _, m := range regexp.MustCompile(`data-run="([^"]+)"`).FindAllStringSubmatch(body, -1) {
			seen[m[1]]++
		}
	}
	path := "/jobs/heartbeat"
	var pages []string
	for range 5 {
		code, _, body := f.get(t, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s = %d\n%s", path, code, body)
		}
		count(body)
		pages = append(pages, path)
		l := links(body)
		if len(pages) == 1 && l["prev"] != "" {
			t.Errorf("the newest page links to newer runs: %s", l["prev"])
		}
		if len(pages) > 1 {
			if got, want := l["prev"], pages[len(pages)-2]; got != want {
				t.Errorf("page %d links newer to %q, want %q", len(pages), got, want)
			}
		}
		if path = l["next"]; path == "" {
			break
		}
	}
	if len(pages) != 3 || len(seen) != 120 {
		t.Fatalf("%d pages, %d runs; want 3 pages with all 120", len(pages), len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("run %s listed %d times", id, n)
		}
	}
	if code, _, _ := f.get(t, "/jobs/heartbeat?cursor=bogus!"); code != http.StatusBadRequest {
		t.Errorf("bad cursor: %d, want 400", code)
	}
}

// The Overview's two skipped figures have distinct names: the runs kept
// in state skipped, and every fire time skipped since the cluster began.
func TestServer_OverviewSkippedFiguresNamed(t *testing.T) {
	f := newFixture(t)
	f.state.counters = map[string]uint64{"skipped": 41}
	_, _, body := f.get(t, "/")
	if !strings.Contains(body, `fire times skipped, all time 41</span>`) {
		t.Errorf("overview does not name the lifetime skipped figure:\n%s", body)
	}
	if strings.Count(body, ">skipped <b>")+strings.Count(body, "· skipped ") > 1 {
		t.Error("two figures called plain skipped")
	}
}

// A node whose store another node serves decides no writes: its Overview
// names that node instead of showing its own zeros next to the cluster's
// count of stale writes refused.
func TestServer_OverviewStoreServedElsewhere(t *testing.T) {
	f := newFixture(t, func(s *Server) { s.StoreRemote = "https://127.0.0.1:8081" })
	f.state.counters = map[string]uint64{"stale_refused": 1}
	_, _, body := f.get(t, "/")
	if want := `The fenced store is served by <b>n1 (127.0.0.1:8081)</b>`; !strings.Contains(body, want) {
		t.Errorf("overview lacks %q", want)
	}
	if strings.Contains(body, "This node's store decided") || strings.Contains(body, `data-outcome="stale_owner"`) {
		t.Error("overview shows this node's store figures, though it serves no store")
	}
	f = newFixture(t)
	if _, _, body := f.get(t, "/"); !strings.Contains(body, "This node's store decided") {
		t.Error("a node with its own store no longer shows its figures")
	}
}

// A key's history gives each decision's time once, to the millisecond;
// an empty output box says it is empty.
func TestServer_PagesSayThingsOnce(t *testing.T) {
	f := newFixture(t)
	_, _, body := f.get(t, "/store/reports/2026-07.csv")
	rows := regexp.MustCompile(`(?s)<tr class="decision[^"]*">\s*<td>([^<]*)(<span[^>]*>[^<]*</span>)?</td>`).FindAllStringSubmatch(body, -1)
	if len(rows) == 0 {
		t.Fatal("the key page has no history rows")
	}
	for _, r := range rows {
		if !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(r[1]) || r[2] != "" {
			t.Errorf("history time cell %q%s: want one time, to the millisecond", r[1], r[2])
		}
	}
	_, _, css := f.get(t, "/static/app.css")
	if !strings.Contains(css, `pre.output:empty::before { content: "(empty)"`) {
		t.Error(`app.css does not label an empty output box "(empty)"`)
	}
}
