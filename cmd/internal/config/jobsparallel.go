package config

import (
	"maps"

	"go.yaml.in/yaml/v3"

	"github.com/fencecron/fencecron/jobs"
)

// parallelJobs is the length of the jobs list from which its jobs are
// decoded on every core. (A variable, so that a test can have a long
// list decoded on one.)
var parallelJobs = 4096

// jobsInParallel decodes items, the jobs section's list (d.inJobs), into
// dst as jobList does, on every core: a file of 100,000 jobs spent some
// 0.3 s decoding them on one while the other waited. Each part of the
// list has a decoder of its own, which reads d's records and the jobs'
// nodes and writes nothing of d's (a job's fields are not recorded); its
// problems and findings join d's after, in the list's order.
func (d *decoder) jobsInParallel(items []*yaml.Node, path string, dst *[]jobEntry) {
	start := len(*dst)
	all := (*dst)[:start+len(items)] // jobList grew it
	isJob := make([]bool, len(items))
	forks := make([]*decoder, len(items)/512+1) // InParallel's parts at most
	jobs.InParallel(len(items), func(part, a, b int) {
		c := d.fork()
		forks[part] = c
		for i := a; i < b; i++ {
			isJob[i] = c.listItem(path, i, items[i], &all[start+i])
		}
	})
	d.join(forks)
	*dst = all[:start+onlyJobs(all[start:], isJob)]
}

// listItem decodes item i of the list at path, of nodes n, into e, and
// reports whether it is a job (decoder.job).
func (d *decoder) listItem(path string, i int, n *yaml.Node, e *jobEntry) bool {
	*e = jobEntry{path: indexPath(path, i), line: n.Line}
	return d.job(n, e)
}

// onlyJobs moves the entries of the items that are jobs to the front of
// entries, in order, and returns how many there are: what is not a job
// leaves no entry, as in jobList.
func onlyJobs(entries []jobEntry, isJob []bool) int {
	n := 0
	for i := range entries {
		if isJob[i] {
			if n != i {
				entries[n] = entries[i]
			}
			n++
		}
	}
	return n
}

// takeDecoded appends the jobs d.decoded decoded to dst, as
// jobsInParallel would have decoded them.
func (d *decoder) takeDecoded(dst *[]jobEntry) {
	dj := d.decoded
	forks := make([]*decoder, len(dj.parts))
	for p := range dj.parts {
		forks[p] = dj.parts[p].c
	}
	d.join(forks)
	n := onlyJobs(dj.entries, dj.isJob)
	if len(*dst) == 0 {
		*dst = dj.entries[:n]
	} else {
		*dst = append(*dst, dj.entries[:n]...)
	}
}

// jobNode is the node of item i of the jobs list: built again from its
// text if the list was decoded as it was parsed (decodedJobs).
func (d *decoder) jobNode(i int) *yaml.Node {
	if n := d.jobNodes[i]; n != nil || d.decoded == nil {
		return n
	}
	n := d.decoded.node(i)
	d.jobNodes[i] = n
	return n
}

// node builds the nodes of item i, an item of the plain shape, again. It
// is the decoder's alone (its checks, on one goroutine): the forks never
// ask for another item than their own.
func (dj *decodedJobs) node(i int) *yaml.Node {
	l := dj.layout
	p := len(dj.parts) - 1
	for p > 0 && l.items[i].off < dj.parts[p].base {
		p--
	}
	pd := &dj.parts[p]
	n, ok := dj.alloc.plainItem(pd.text[l.items[i].off-pd.base:l.itemEnd(i)-pd.base], l.items[i].line, l.indent)
	if !ok {
		// It was built before from the same text: never here.
		n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: l.items[i].line, Column: l.indent + 3}
	}
	return n
}

// fork returns a decoder for a part of the jobs list (see
// jobsInParallel), which writes nothing of d's.
func (d *decoder) fork() *decoder {
	return &decoder{
		file: d.file, lookup: d.lookup, unsetOK: d.unsetOK,
		envUsed: map[string]bool{}, failed: map[string]bool{},
		values: d.values, keys: d.keys, jobNodes: d.jobNodes, inJobs: true,
	}
}

// join adds what the forks found to d's, in the forks' order.
func (d *decoder) join(forks []*decoder) {
	for _, c := range forks {
		if c == nil {
			continue
		}
		d.probs = append(d.probs, c.probs...)
		maps.Copy(d.failed, c.failed)
		maps.Copy(d.envUsed, c.envUsed)
		d.literals = append(d.literals, c.literals...)
		d.unset = append(d.unset, c.unset...)
	}
}

// decodedJobs is a jobs list decoded while parseParts parsed it, each
// part by a decoder of its own (a fork), each item as soon as it was
// parsed: the nodes of an item of the plain shape are reused by the
// next, and 100,000 items no longer leave some 120 MB of nodes behind
// them for the decode (memory a fresh `fencecron apply` paid for in page
// faults, about a quarter of its CPU). Such an item is nil in the list,
// and its nodes are built again, from its part's text, only where a
// problem asks where something is written in it (decoder.jobNode).
type decodedJobs struct {
	seq     *yaml.Node // the list, once parsed
	entries []jobEntry // by item
	isJob   []bool
	parts   []partDecoder
	layout  jobsLayout
	alloc   nodeAlloc // the nodes built again
}

// partDecoder decodes one part of the list.
type partDecoder struct {
	dj   *decodedJobs
	c    *decoder
	text string // the part's, from offset base of the file
	base int
}

func newDecodedJobs(d *decoder, l jobsLayout, parts int) *decodedJobs {
	dj := &decodedJobs{entries: make([]jobEntry, len(l.items)), isJob: make([]bool, len(l.items)), parts: make([]partDecoder, parts), layout: l}
	for p := range dj.parts {
		dj.parts[p] = partDecoder{dj: dj, c: d.fork()}
	}
	return dj
}

// part is the decoder of part p; nil for no decodedJobs.
func (dj *decodedJobs) part(p int) *partDecoder {
	if dj == nil {
		return nil
	}
	return &dj.parts[p]
}

// setText records the part's text, which starts at offset base of the
// file.
func (pd *partDecoder) setText(text string, base int) {
	if pd != nil {
		pd.text, pd.base = text, base
	}
}

// decode decodes item i, of nodes n, as jobsInParallel does.
func (pd *partDecoder) decode(i int, n *yaml.Node) {
	if pd == nil {
		return
	}
	pd.c.cur, pd.c.curIndex = n, i
	pd.dj.isJob[i] = pd.c.listItem(SectionJobs, i, n, &pd.dj.entries[i])
	pd.c.cur = nil
}
