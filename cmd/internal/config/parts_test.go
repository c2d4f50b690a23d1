package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// wholeRoot parses data whole, as yaml.v3 does.
func wholeRoot(data []byte) *yaml.Node {
	doc, ok := parseDocument(data)
	if !ok || len(doc.Content) != 1 {
		return nil
	}
	return doc.Content[0]
}

// checkParts parses data in parts and, where that was done, compares the
// tree with the whole parse's. It reports whether it was done.
func checkParts(t *testing.T, data []byte, parts int) bool {
	t.Helper()
	got, ok := parseInParts(data, parts)
	if !ok {
		return false
	}
	want := wholeRoot(data)
	if want == nil {
		t.Fatalf("parsed in %d parts a file that does not parse whole:\n%s", parts, data)
	}
	if d := sameTree(got, want, "root"); d != "" {
		l, _ := findJobs(data)
		t.Fatalf("in %d parts (%v), the tree differs from the whole parse's at %s\n%s", parts, l, d, data)
	}
	return true
}

// mixed is a file of every section, with the jobs between others, items
// of every form the list may hold, comments, block scalars whose text has
// lines that look like items, and nested lists.
const mixed = `# a node's file
node:
  name: n1
  join: ["127.0.0.1:7946",
    "127.0.0.1:7947"]
jobs:
  # the first
  - name: first
    schedule: "@every 1m"
    shell: |
      echo one
      - not an item
  - name: second   # trailing comment
    schedules:
      - "0 * * * *"
      - '30 * * * *'
    command: [/bin/echo,
      two]
# a comment at column 0 inside the list

  - name: "third
      still the name"
    env: {A: "1", B: "2"}
    shell: >-
      folded
      text
  - &anchored
    name: fourth
    shell: "true"
  - name: fifth
    http: {url: "http://127.0.0.1:1/x"}
  -
    name: sixth
    shell: "true"
  - name: seventh
    shell: plain multi
      line scalar
api:
  token: x
store:
  retention: []
`

// interleaved has items of the plain shape (plainItem builds their
// trees) between items left to yaml.v3, in the middle of the list.
const interleaved = `jobs:
  - name: p1
    schedule: "@every 1m"
    command: ["/bin/true", 'x']
  - name: y1
    shell: |
      echo
      - not an item
  - name: p2
    retries: 3

  - name: "q
      r"
  - name: p3   # c
# a comment at column 0
    paused: true
  - &a
    name: y2
  - name: p4
    shell: 'x'
  - name: y3
    env: {A: "1"}
  - name: p5
    timeout: 5m
`

// dedentJobs returns data with its jobs list moved to column 0.
func dedentJobs(data string) string {
	lines := strings.Split(data, "\n")
	in := false
	for i, l := range lines {
		switch {
		case l == "jobs:":
			in = true
		case in && l != "" && l[0] != ' ' && l[0] != '#':
			in = false
		case in:
			lines[i] = strings.TrimPrefix(l, "  ")
		}
	}
	return strings.Join(lines, "\n")
}

func TestParseInParts_SameTree(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
	}{
		{"mixed", mixed},
		{"at column 0", dedentJobs(mixed)},
		{"list last", "cluster:\n  expect: 3\njobs:\n  - name: a\n    shell: x\n  - name: b\n    shell: y\n  - name: c\n    shell: z"},
		{"generated", string(scaleFile(1000))},
		{"interleaved", interleaved},
		{"document start", "---\njobs:\n  - name: a\n  - name: b\n  - name: c\n...\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, parts := range []int{1, 2, 3, 7, 1000} {
				if !checkParts(t, []byte(tc.data), parts) {
					t.Fatalf("not parsed in %d parts; want it parsed in parts and compared", parts)
				}
			}
		})
	}
}

// TestParseInParts_WholeWhereACutWouldMislead: files where a cut at an
// item's line would split something are parsed whole (or, in parts, to
// the same tree), never to another tree.
func TestParseInParts_WholeWhereACutWouldMislead(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		inParts    bool // whether it may be parsed in parts at all
	}{
		{"a quoted string over an item's line", "jobs:\n  - name: \"a\n  - b\"\n  - name: c\n  - name: d\n", false},
		{"a flow list over an item's line", "jobs:\n  - command: [a,\n  - b]\n  - name: c\n  - name: d\n", false},
		{"an alias to an anchor in the head", "x: &d {shell: x}\njobs:\n  - name: a\n  - name: b\n  - <<: *d\n    name: c\n", false},
		{"an alias to another item", "jobs:\n  - &a {name: a}\n  - name: b\n  - name: c\n  - *a\n", true}, // in one part, it is the same tree
		{"an alias within one item", "jobs:\n  - name: a\n  - name: b\n    x: &s y\n    z: *s\n  - name: c\n", true},
		{"CRLF", "jobs:\r\n  - name: a\r\n  - name: b\r\n  - name: c\r\n", false},
		{"a tab before content", "jobs:\n  - name: a\n  - name: b\n\t- name: c\n", false},
		{"a byte-order mark", "\xef\xbb\xbfjobs:\n  - name: a\n  - name: b\n  - name: c\n", false},
		{"a flow list", "jobs: [{name: a}, {name: b}]\n", false},
		{"one item", "jobs:\n  - name: a\n", false},
		{"a second document", "jobs:\n  - name: a\n  - name: b\n---\nx: 1\n", false},
		{"a mapping for jobs", "jobs:\n  a: 1\n  b: 2\n", false},
		{"a duplicate jobs key", "jobs:\n  - name: a\n  - name: b\njobs:\n  - name: c\n", true},
		{"an item more indented", "jobs:\n  - name: a\n    - name: b\n  - name: c\n", false},
		{"items less indented later", "jobs:\n    - name: a\n    - name: b\n  - name: c\n", false},
		{"jobs inside a quoted string", "a: \"x\njobs:\n  - b\n  - c\n  - d\"\n", false},
		// Found in review: each gave another tree in parts before.
		{"U+2028 in a string", "jobs:\n  - a\n  - \"x\u2028y\"\n  - c\nz: 1\n", false},
		{"U+2029 in a comment", "jobs:\n  - a # x\u2029\n  - b\n  - c\nz: 1\n", false},
		{"U+0085 in a string", "jobs:\n  - a\n  - \"x\u0085y\"\n  - c\n", false},
		{"a %TAG directive", "%TAG !! tag:other:\n---\njobs:\n  - a\n  - !!str b\n  - c\n", false},
		{"a local %TAG", "%TAG ! tag:example.com,2000:\n---\njobs:\n  - a\n  - !foo b\n  - c\n", false},
		{"nesting at the parser's limit", "jobs:\n  - a\n  - " + strings.Repeat("- ", 9999) + "x\n  - c\n", false},
		{"an explicit key without a value", "jobs:\n  - a\n  - ? b\n  - c\n", true},
		{"nested explicit keys", "jobs:\n  - a\n  - - ? b\n  - c\n", true},
		{"two explicit keys", "jobs:\n  - a\n  - ? b\n    ? c\n  - d\n", true},
		{"an alias after the list to a redefined anchor", "x: &a 1\njobs:\n  - a\n  - &a b\n  - c\ny: *a\n", false},
		{"an alias after the list to a later item", "jobs:\n  - &a a\n  - &a b\n  - c\ny: *a\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, parts := range []int{1, 2, 3, 4} {
				if done := checkParts(t, []byte(tc.data), parts); done && !tc.inParts {
					t.Fatalf("parsed in %d parts; want it parsed whole", parts)
				}
			}
		})
	}
}

// TestParse_InPartsReportsAsWhole: a file large enough to be parsed in
// parts decodes to the same jobs, and its problems are reported at the
// same lines, as when it is parsed whole.
func TestParse_InPartsReportsAsWhole(t *testing.T) {
	var b strings.Builder
	b.WriteString("# jobs alone\njobs:\n")
	n := 0
	for b.Len() < partsMin+1 {
		fmt.Fprintf(&b, "  - name: job-%06d\n    schedule: \"%d * * * *\"\n    shell: |\n      echo %d\n      - still the script\n", n, n%60, n)
		n++
	}
	b.WriteString("log:\n  format: json\n")
	good := b.String()
	if _, ok := parseInParts([]byte(good), 2); !ok {
		t.Fatal("the test's file is not parsed in parts")
	}
	f, err := Parse("jobs.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Jobs) != n || f.Jobs[n-1].Name != fmt.Sprintf("job-%06d", n-1) || f.Jobs[n-1].Shell != fmt.Sprintf("echo %d\n- still the script\n", n-1) || f.Log.Format != "json" {
		t.Fatalf("got %d jobs, the last %+v, log format %q", len(f.Jobs), f.Jobs[len(f.Jobs)-1], f.Log.Format)
	}

	// Two problems: a bad schedule in the last item, and an unknown
	// field after the list.
	bad := strings.Replace(good, fmt.Sprintf("schedule: \"%d * * * *\"\n    shell: |\n      echo %d\n", (n-1)%60, n-1), "schedule: \"61 * * * *\"\n    shell: |\n      echo\n", 1)
	bad = strings.Replace(bad, "log:\n  format: json\n", "log:\n  formt: json\n", 1)
	_, errParts := Parse("jobs.yaml", []byte(bad))
	whole := parseWhole(t, []byte(bad))
	if errParts == nil || whole == nil || errParts.Error() != whole.Error() {
		t.Fatalf("in parts: %v\nwhole: %v", errParts, whole)
	}
	lines := strings.Count(bad, "\n")
	for _, want := range []string{fmt.Sprintf("jobs.yaml:%d:", lines), fmt.Sprintf("jobs.yaml:%d:", lines-5)} {
		if !strings.Contains(errParts.Error(), want) {
			t.Errorf("the problems do not name %s: %v", want, errParts)
		}
	}
}

// parseWhole is Parse with the file parsed whole.
func parseWhole(t *testing.T, data []byte) error {
	t.Helper()
	defer func(old int) { partsMin = old }(partsMin)
	partsMin = len(data) + 1
	_, err := Parse("jobs.yaml", data)
	return err
}

func FuzzParseInParts(f *testing.F) {
	f.Add(mixed, 2)
	f.Add("jobs:\n  - name: \"a\n  - b\"\n  - name: c\n", 2)
	f.Add("jobs:\n- a\n- b: [1,\n  2]\n- c\n", 3)
	f.Add("jobs:\n  - a\n  - ? b\n    ? c\n  - d\n", 3)
	f.Add("%TAG !! tag:other:\n---\njobs:\n  - a\n  - !!str b\n  - c\n", 2)
	f.Add("jobs:\n  - &a a\n  - &a b\n  - c\ny: *a\n", 2)
	f.Add("jobs:\n  - a # x\u2029\n  - b\n  - c\nz: 1\n", 2)
	f.Fuzz(func(t *testing.T, data string, parts int) {
		if parts < 1 || parts > 64 || len(data) > 1<<16 {
			return
		}
		checkParts(t, []byte(data), parts)
	})
}

// ParseOnly parses the chosen items to the jobs the whole file has at
// their places, and refuses (ok false) an item that is not whole on its
// own: its quoted string runs over the next item's line, so leaving that
// item out would change what it means.
func TestItems_ParseOnly(t *testing.T) {
	var b strings.Builder
	b.WriteString("store: {max_body_bytes: 1000}\njobs:\n")
	for i := range 20 {
		fmt.Fprintf(&b, "  - name: job-%d\n    schedule: \"%d * * * *\"\n    command: [\"/bin/true\", \"%d\"]\n    max_output_bytes: 500\n", i, i, i)
	}
	b.WriteString("# the end\n")
	data := []byte(b.String())
	whole, err := Parse("jobs.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	items, ok := CutJobs(data)
	if !ok || items.Len() != 20 {
		t.Fatalf("CutJobs: %v, %d items", ok, items.Len())
	}
	idx := []int{0, 7, 8, 19}
	f, ok, err := items.ParseOnly("jobs.yaml", idx)
	if !ok || err != nil || len(f.Jobs) != len(idx) {
		t.Fatalf("ParseOnly: %v, %v", ok, err)
	}
	for k, i := range idx {
		if !reflect.DeepEqual(f.Jobs[k], whole.Jobs[i]) {
			t.Errorf("job %d parsed alone: %+v; whole: %+v", i, f.Jobs[k], whole.Jobs[i])
		}
	}
	if f.Store.MaxBodyBytes != 1000 {
		t.Errorf("the frame's store section: %+v", f.Store)
	}

	runsOn := []byte("jobs:\n  - name: a\n    command: [\"x\", \"y\n  - z\"]\n  - name: b\n  - name: c\n")
	items, ok = CutJobs(runsOn)
	if !ok || items.Len() != 4 {
		t.Fatalf("CutJobs: %v, %d items", ok, items.Len())
	}
	if _, ok, _ := items.ParseOnly("jobs.yaml", []int{0, 3}); ok {
		t.Error("an item whose string runs over the next item's line was parsed on its own")
	}
}

// What applycache rests on: no file with an alias anywhere is valid, so
// an item's meaning never depends on an anchor elsewhere in the file.
// Each alias here is where a value may be; a merge key ("<<: *a") is an
// unknown field.
func TestParse_AliasesRefused(t *testing.T) {
	const job = "name: a\n    schedule: \"@daily\"\n    command: [x]\n"
	for name, data := range map[string]string{
		"a job":               "jobs:\n  - &j {name: a, schedule: \"@daily\", command: [x]}\n  - *j\n",
		"a field of a job":    "jobs:\n  - " + job + "    dir: &s /tmp\n  - name: b\n    schedule: \"@daily\"\n    command: [x]\n    dir: *s\n",
		"a command's element": "jobs:\n  - " + job + "    env: {A: &c x}\n  - name: b\n    schedule: \"@daily\"\n    command: [*c]\n",
		"an env value":        "jobs:\n  - " + job + "    env: {A: &v x}\n  - name: b\n    schedule: \"@daily\"\n    command: [x]\n    env: {B: *v}\n",
		"a target's value":    "jobs:\n  - " + job + "    target: {zone: &z a}\n  - name: b\n    schedule: \"@daily\"\n    command: [x]\n    target: {zone: *z}\n",
		"after the list":      "jobs:\n  - " + job + "    dir: &c /tmp\nstore:\n  path: *c\n",
		"before the list":     "store:\n  path: &p /tmp\njobs:\n  - " + job + "    dir: *p\n",
		"a merge":             "jobs:\n  - &a {name: a, schedule: \"@daily\", command: [x]}\n  - <<: *a\n    name: b\n",
	} {
		_, err := Parse("jobs.yaml", []byte(data))
		if err == nil || !strings.Contains(err.Error(), "aliases (*") && !strings.Contains(err.Error(), "got an alias") && !strings.Contains(err.Error(), `unknown field "<<"`) {
			t.Errorf("%s: %v; want the alias refused", name, err)
		}
	}
}
