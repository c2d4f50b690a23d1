package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/fencecron/fencecron/jobs"
)

// Parsing a large file's jobs in parts.
//
// yaml.v3 parses on one core, and for a file of 100,000 jobs building its
// node tree is most of what `fencecron apply` and `validate` spend before
// anything is sent. The jobs of such a file are a block list whose items
// each start on a line of their own, at the list's indentation, with "- ".
// Cut at those lines, the items parse on every core, and the parts are
// put into the tree of the rest of the file.
//
// A cut must not change what the file means, so the parts are trusted
// only when each tells the same story as the cut: every part parses, as
// the value of a "jobs:" key as in the file, to exactly the items it was
// cut for, each starting on its own item's line; and the frame (the file
// with its first item in place of the whole list) parses to the jobs key
// where the cut found it and to the same first item as the first part.
// Whatever spans a cut (a quoted string or a flow list running over an
// item's line, an alias to an anchor in another part, an alias after the
// list) leaves a part or the frame that does not parse or does not
// agree, and the file is then parsed whole. So is any file not of the
// plain shape: a carriage return anywhere, a line break yaml.v3 counts
// that is not "\n" (U+0085, U+2028, U+2029), a byte-order mark, a tab
// before content, a directive (a %TAG changes what the parts' tags
// mean), no top-level "jobs:" line followed by a block list. A file the
// scan for that shape turns away costs the scan; one whose parts or frame
// disagree, both parses; a plain one, most large files, one parse on
// every core. Within a part, an item of the plain shape has its tree
// built directly (plainitem.go), and each run of the other items is
// parsed by yaml.v3 as a part of its own. Each such run but the list's
// last ends with an empty item of the list's own, dropped after: a key
// with no value at a run's end is placed at the token after it, which
// in the file is the next item's "-". The tree is then the one a whole
// parse builds, but for comments, which nothing here reads:
// TestParseInParts_SameTree and FuzzParseInParts compare the two. (A long
// list a decoder parses is decoded as it is parsed, and its items of the
// plain shape are left out of the tree: see parseParts.)

// partsMin is the size from which a file's jobs are parsed in parts: a
// smaller file parses whole in a few milliseconds. (A variable, so that a
// test can have a file parsed whole.)
var partsMin = 1 << 20

// itemLine is where one item of the jobs list starts: the offset of its
// line and the line's number, from 1.
type itemLine struct{ off, line int }

// jobsLayout is where a file's jobs list is.
type jobsLayout struct {
	jobsLine int        // the line of "jobs:"
	indent   int        // the items' "-" column, from 0
	items    []itemLine // where each item starts
	end      int        // the offset of the first line after the list
	endLine  int        // and its number
}

// findJobs finds the jobs list of data, or reports that data is not of
// the plain shape parseInParts handles.
func findJobs(data []byte) (jobsLayout, bool) {
	l := jobsLayout{indent: -1, end: len(data)}
	if bytes.IndexByte(data, '\r') >= 0 || bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) ||
		bytes.Contains(data, []byte("\u0085")) || bytes.Contains(data, []byte("\u2028")) || bytes.Contains(data, []byte("\u2029")) {
		return l, false
	}
	// Room for an item at every "-" (each item's line has one), up to
	// the most a set may hold: what is not used is never touched, where
	// growing the list by appends writes several times its size.
	l.items = make([]itemLine, 0, min(bytes.Count(data, []byte("-")), jobs.MaxJobs)+1)
	off, n := 0, 1
scan:
	for ; off < len(data); n++ {
		next := len(data)
		if i := bytes.IndexByte(data[off:], '\n'); i >= 0 {
			next = off + i + 1
		}
		text := bytes.TrimSuffix(data[off:next], []byte("\n"))
		sp := 0
		for sp < len(text) && text[sp] == ' ' {
			sp++
		}
		rest := text[sp:]
		if len(rest) > 0 && rest[0] == '\t' {
			return l, false
		}
		blank := len(rest) == 0 || rest[0] == '#'
		switch {
		case l.jobsLine == 0 && sp == 0 && len(rest) > 0 && rest[0] == '%':
			return l, false // a directive
		case l.jobsLine == 0:
			if sp == 0 && isJobsKey(rest) {
				l.jobsLine = n
			}
		case blank:
		case l.indent < 0:
			if !isItem(rest) {
				return l, false // not a block list
			}
			l.indent = sp
			l.items = append(l.items, itemLine{off, n})
		case sp == l.indent && isItem(rest):
			l.items = append(l.items, itemLine{off, n})
		case sp > l.indent:
		default:
			l.end = off
			break scan
		}
		off = next
	}
	l.endLine = n
	return l, l.jobsLine > 0 && len(l.items) >= 2
}

// isJobsKey reports whether a line at column 0 is the key of the jobs
// section with nothing after it but a comment.
func isJobsKey(text []byte) bool {
	rest, ok := bytes.CutPrefix(text, []byte(SectionJobs+":"))
	if !ok {
		return false
	}
	if len(rest) == 0 {
		return true
	}
	if rest[0] != ' ' {
		return false
	}
	rest = bytes.TrimLeft(rest, " ")
	return len(rest) == 0 || rest[0] == '#'
}

// isItem reports whether a line's content starts an item of a block list.
func isItem(rest []byte) bool {
	return len(rest) > 0 && rest[0] == '-' && (len(rest) == 1 || rest[1] == ' ')
}

// parseInParts returns the root of data as yaml.v3 parses it whole, with
// its jobs list parsed in parts (at most parts of them at once), or false
// where the file is not of the shape that makes that safe; the caller
// then parses it whole.
func parseInParts(data []byte, parts int) (root *yaml.Node, ok bool) {
	return parseParts(data, parts, nil)
}

// parseParts is parseInParts. Given d, it also decodes a list of
// parallelJobs items or more as it parses it (parsePart), and leaves the
// jobs it decoded in d.decoded: an item of the plain shape is then left
// out of the tree (nil), and its nodes are built again only where a
// problem asks where something is written in it (decoder.jobNode).
func parseParts(data []byte, parts int, d *decoder) (root *yaml.Node, ok bool) {
	l, ok := findJobs(data)
	if !ok || parts < 1 {
		return nil, false
	}
	defer func() {
		if recover() != nil {
			root, ok = nil, false // the frame is not the file: parse it whole
		}
	}()
	// Every item is parsed in a part, the first too: that the first part
	// parses to the frame's first item shows that nothing in it runs on
	// into the text after the list, which follows it in the frame.
	parts = min(parts, len(l.items))
	got := make([][]*yaml.Node, parts)
	var dj *decodedJobs
	if d != nil && len(l.items) >= parallelJobs {
		dj = newDecodedJobs(d, l, parts)
	}
	var wg sync.WaitGroup
	for p := range parts {
		a, b := p*len(l.items)/parts, (p+1)*len(l.items)/parts
		wg.Go(func() { got[p] = parsePart(data, l, a, b, dj.part(p)) })
	}
	defer wg.Wait() // also if parsing the frame panics
	root, ok = parseFrame(data, l)
	wg.Wait()
	if !ok {
		return nil, false
	}
	items := make([]*yaml.Node, 0, len(l.items))
	for _, p := range got {
		if p == nil {
			return nil, false
		}
		items = append(items, p...)
	}
	seq := jobsList(root, l)
	if sameTree(seq.Content[0], items[0], "") != "" {
		return nil, false
	}
	seq.Content = items
	if dj != nil {
		dj.seq, d.decoded = seq, dj
	}
	return root, true
}

// sameTree returns where a and b differ, or "" if they are the same tree
// but for comments.
func sameTree(a, b *yaml.Node, at string) string {
	switch {
	case a == nil || b == nil:
		if a != b {
			return at + ": one is missing"
		}
		return ""
	case a.Kind != b.Kind, a.Style != b.Style, a.Tag != b.Tag, a.Value != b.Value, a.Anchor != b.Anchor:
		return fmt.Sprintf("%s: %v %v %q %q &%s, want %v %v %q %q &%s", at, a.Kind, a.Style, a.Tag, a.Value, a.Anchor, b.Kind, b.Style, b.Tag, b.Value, b.Anchor)
	case a.Line != b.Line || a.Column != b.Column:
		return fmt.Sprintf("%s: at %d:%d, want %d:%d", at, a.Line, a.Column, b.Line, b.Column)
	case len(a.Content) != len(b.Content):
		return fmt.Sprintf("%s: %d children, want %d", at, len(a.Content), len(b.Content))
	}
	if (a.Alias == nil) != (b.Alias == nil) || a.Alias != nil && (a.Alias.Line != b.Alias.Line || a.Alias.Column != b.Alias.Column) {
		return at + ": the alias differs"
	}
	for i := range a.Content {
		if d := sameTree(a.Content[i], b.Content[i], fmt.Sprintf("%s/%d", at, i)); d != "" {
			return d
		}
	}
	return ""
}

// parseFrame parses the file without the jobs list's items but its first:
// its head, that item and its tail, with the tail's lines numbered as in
// the file. It returns the root mapping.
func parseFrame(data []byte, l jobsLayout) (*yaml.Node, bool) {
	second := l.items[1]
	frame := make([]byte, 0, second.off+len(data)-l.end)
	frame = append(append(frame, data[:second.off]...), data[l.end:]...)
	doc, ok := parseDocument(frame)
	if !ok || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, false
	}
	root := doc.Content[0]
	if seq := jobsList(root, l); seq == nil || len(seq.Content) != 1 || !within(seq.Content[0], l.items[0].line, second.line) {
		return nil, false
	}
	// The tail starts at the second item's line in the frame.
	moveLines(root, second.line, l.endLine-second.line)
	if aliasFrom(root, l.endLine) {
		return nil, false // it may name an anchor of a later item
	}
	return root, true
}

// aliasFrom reports whether the tree at n holds an alias on line from or
// later.
func aliasFrom(n *yaml.Node, from int) bool {
	if n.Kind == yaml.AliasNode && n.Line >= from {
		return true
	}
	for _, c := range n.Content {
		if aliasFrom(c, from) {
			return true
		}
	}
	return false
}

// jobsList returns the jobs list of root, the value of the "jobs" key on
// the line and at the column the cut found it, if it is a block list whose
// "-" is where the cut found it.
func jobsList(root *yaml.Node, l jobsLayout) *yaml.Node {
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == SectionJobs && k.Line == l.jobsLine && k.Column == 1 {
			if v.Kind == yaml.SequenceNode && v.Column == l.indent+1 {
				return v
			}
			return nil
		}
	}
	return nil
}

// parsePart parses items a to b of the list: each of the plain shape
// directly (plainItem), each run of the others with yaml.v3 (parseItems),
// as a part of its own. It returns nil if such a run does not parse to
// its items. Given pd, it decodes each item as soon as it is parsed, in
// the list's order, and leaves out an item of the plain shape but the
// list's first (parseParts compares that one with the frame's): its
// nodes are reused by the next.
func parsePart(data []byte, l jobsLayout, a, b int, pd *partDecoder) []*yaml.Node {
	// One string for the part: the scalars' values are substrings of it.
	base := l.items[a].off
	text := string(data[base:l.itemEnd(b-1)])
	items := make([]*yaml.Node, b-a)
	var alloc, kept nodeAlloc // alloc's nodes are reused, item after item
	// plain parses item i if it is of the plain shape; its nodes are kept
	// where they are to be (see above).
	plain := func(i int) (*yaml.Node, bool) {
		alloc.reset()
		to := &alloc
		if pd == nil || i == 0 {
			to = &kept
		}
		return to.plainItem(text[l.items[i].off-base:l.itemEnd(i)-base], l.items[i].line, l.indent)
	}
	// keep stores item i, which is of the plain shape, and decodes it.
	keep := func(i int, n *yaml.Node) {
		if pd == nil || i == 0 {
			items[i-a] = n
		}
		pd.decode(i, n)
	}
	pd.setText(text, base)
	for i := a; i < b; {
		if n, ok := plain(i); ok {
			keep(i, n)
			i++
			continue
		}
		// A run of items not of the plain shape, to the next that is.
		j, next := i+1, (*yaml.Node)(nil)
		for ; j < b; j++ {
			if n, ok := plain(j); ok {
				next = n
				break
			}
		}
		run := parseItems(data[l.items[i].off:l.itemEnd(j-1)], l.items[i:j], l.indent, j == len(l.items))
		if run == nil {
			return nil
		}
		copy(items[i-a:], run)
		for k := i; k < j; k++ {
			pd.decode(k, items[k-a])
		}
		if next != nil {
			keep(j, next) // its nodes are still those plain built
			j++
		}
		i = j
	}
	return items
}

// itemEnd is the offset where item i ends: the next item's line, or the
// end of the list.
func (l jobsLayout) itemEnd(i int) int {
	if i+1 < len(l.items) {
		return l.items[i+1].off
	}
	return l.end
}

// parseItems parses part, the text of the items that start at lines, as
// the value of a top-level "jobs:" key (so as deep as in the file), and
// returns the items, numbered as in the file; or nil if the part does
// not parse to exactly those items, each starting on its own item's
// line. A part but the last is parsed with an empty item after it, as
// the next part's first item follows it in the file.
func parseItems(part []byte, lines []itemLine, indent int, last bool) (items []*yaml.Node) {
	defer func() {
		if recover() != nil {
			items = nil // the whole parse reports it
		}
	}()
	const key = SectionJobs + ":\n"
	text := make([]byte, 0, len(key)+len(part)+indent+2)
	text = append(append(text, key...), part...)
	want := len(lines)
	if !last {
		text = append(append(text, bytes.Repeat([]byte(" "), indent)...), "-\n"...)
		want++
	}
	doc, ok := parseDocument(text)
	if !ok || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode || len(doc.Content[0].Content) != 2 {
		return nil
	}
	seq := doc.Content[0].Content[1]
	if seq.Kind != yaml.SequenceNode || seq.Column != indent+1 || len(seq.Content) != want {
		return nil
	}
	seq.Content = seq.Content[:len(lines)]
	moveLines(seq, 1, lines[0].line-2)
	for i, it := range seq.Content {
		next := math.MaxInt
		if i+1 < len(lines) {
			next = lines[i+1].line
		}
		if !within(it, lines[i].line, next) {
			return nil
		}
	}
	return seq.Content
}

// parseDocument parses data as one YAML document.
func parseDocument(data []byte) (*yaml.Node, bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, extra yaml.Node
	if err := dec.Decode(&doc); err != nil {
		return nil, false
	}
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return &doc, doc.Kind == yaml.DocumentNode
}

// within reports whether n starts on a line in [from, to).
func within(n *yaml.Node, from, to int) bool {
	return n.Line >= from && n.Line < to
}

// moveLines adds by to the line of every node of the tree at n that is on
// line from or later.
func moveLines(n *yaml.Node, from, by int) {
	if n.Line >= from {
		n.Line += by
	}
	for _, c := range n.Content {
		moveLines(c, from, by)
	}
}

// String describes l, for test failures.
func (l jobsLayout) String() string {
	return fmt.Sprintf("jobs: on line %d, %d items at column %d, list ends on line %d", l.jobsLine, len(l.items), l.indent+1, l.endLine)
}

// Items is a file's jobs list cut at its items' lines, as parseInParts
// cuts it, for `fencecron apply` to parse only the items it does not know
// (see cmd/internal/applycache).
type Items struct {
	data []byte
	l    jobsLayout
}

// CutJobs cuts data's jobs list at its items' lines, or reports that data
// is not of the plain shape parseInParts handles.
func CutJobs(data []byte) (Items, bool) {
	l, ok := findJobs(data)
	return Items{data, l}, ok
}

// Len is the number of items.
func (it Items) Len() int { return len(it.l.items) }

// Item is the text of item i, from its line to the next item's (or to the
// end of the list).
func (it Items) Item(i int) []byte {
	return it.data[it.l.items[i].off:it.l.itemEnd(i)]
}

// Frame is the file around the list: what is before its first item and
// what is after its last.
func (it Items) Frame() (head, tail []byte) {
	return it.data[:it.l.items[0].off], it.data[it.l.end:]
}

// ParseOnly parses, as LoadAllowUnset parses a file, the file with only
// the items idx (ascending) in its jobs list. Each of them, but the
// list's last, must be shown to hold one whole job that ends before the
// next item's line, as in parseInParts: an item whose quoted string ran
// on over the next item's line would mean something else once the next
// item is left out. ok is false if one is not; the file must then be
// parsed whole. A problem is reported at its line in the shorter file:
// parse the whole file to report it where the file has it.
func (it Items) ParseOnly(name string, idx []int) (f *File, ok bool, err error) {
	head, tail := it.Frame()
	size := len(head) + len(tail)
	for _, i := range idx {
		size += len(it.Item(i))
	}
	text := make([]byte, 0, size)
	text = append(text, head...)
	for _, i := range idx {
		last := i == len(it.l.items)-1
		if !last && parseItems(it.Item(i), it.l.items[i:i+1], it.l.indent, false) == nil {
			return nil, false, nil
		}
		text = append(text, it.Item(i)...)
	}
	text = append(text, tail...)
	f, err = ParseAllowUnset(name, text)
	return f, true, err
}
