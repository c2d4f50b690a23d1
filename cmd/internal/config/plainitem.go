package config

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// Items of the plain shape, built without yaml.v3.
//
// Parsed in parts, a file of 100,000 jobs still spent most of its parse
// in yaml.v3's scanner, events and node tree (`-bench Parse_100k`: 0.69 s
// and 5.3 million allocations; 0.20-0.47 s with this). Most large files
// are generated, and their items are a few "key: value" lines each, so
// an item of that shape has its tree built here, directly: the mapping
// of its keys, each value a plain or quoted scalar on the key's line, or
// a flow list of quoted scalars. Anything else in an item (a nested
// block, a scalar over several lines, an escape, an anchor, a tag, a
// character outside printable ASCII) leaves the item to yaml.v3, as
// before. The tree is the one yaml.v3 builds, but for comments, which
// nothing here reads: TestPlainItem_AsYAML and FuzzPlainItem compare the
// two.

// nodeAlloc hands out the nodes of many items, and their lists of
// nodes, from blocks of them: a node each is most of the allocations of
// a parse. After a reset it hands out the same ones again, for an item
// decoded as soon as it is built and then dropped: the nodes of 100,000
// items are some 120 MB, memory a fresh command pays for in page faults.
type nodeAlloc struct {
	tags  map[string]string // keys' tags, resolved once
	nodes [][]yaml.Node
	usedN int // nodes handed out since the last reset
	lists []*yaml.Node
	usedL int // of lists, since then
}

// nodeBlock is how many nodes a block of nodeAlloc holds.
const nodeBlock = 1024

// node returns a new node holding n.
func (a *nodeAlloc) node(n yaml.Node) *yaml.Node {
	if a.usedN == len(a.nodes)*nodeBlock {
		a.nodes = append(a.nodes, make([]yaml.Node, nodeBlock))
	}
	p := &a.nodes[a.usedN/nodeBlock][a.usedN%nodeBlock]
	a.usedN++
	*p = n
	return p
}

// list returns an empty list of nodes with room for n.
func (a *nodeAlloc) list(n int) []*yaml.Node {
	if a.usedL+n > len(a.lists) {
		// The lists in use stay where they are, in the buffer before.
		a.lists, a.usedL = make([]*yaml.Node, max(nodeBlock, 2*n)), 0
	}
	l := a.lists[a.usedL : a.usedL : a.usedL+n]
	a.usedL += n
	return l
}

// reset makes the nodes and lists handed out since the last reset free
// again: nothing may use them any more.
func (a *nodeAlloc) reset() { a.usedN, a.usedL = 0, 0 }

// plainItem returns the tree of item, the text of one item of the jobs
// list (its "- " at column indent+1, on line line of the file), if it is
// of the plain shape; its nodes are a's, the scalars' values substrings
// of text.
func (a *nodeAlloc) plainItem(text string, line, indent int) (*yaml.Node, bool) {
	p := itemParser{text: text, line: line, alloc: a}
	m := a.node(yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: line, Column: indent + 3, Content: a.list(8)})
	for first := true; p.off < len(p.text); p.line++ {
		nl := strings.IndexByte(p.text[p.off:], '\n')
		if nl < 0 {
			return nil, false // the file's last line, without its line break: left to yaml.v3
		}
		end := p.off + nl
		ln := p.text[p.off:end]
		sp := countSpaces(ln)
		switch {
		case first:
			// "- " at the list's column, then the first key.
			if sp != indent || len(ln) < indent+3 || ln[indent] != '-' || ln[indent+1] != ' ' || ln[indent+2] == ' ' {
				return nil, false
			}
			first = false
		case sp == len(ln) || ln[sp] == '#' && printable(ln):
			p.off = end + 1 // a blank line or a comment
			continue
		case sp != indent+2:
			return nil, false
		}
		k, v, ok := p.keyValue(ln, indent+2)
		if !ok {
			return nil, false
		}
		m.Content = append(m.Content, k, v)
		p.off = end + 1
	}
	return m, len(m.Content) > 0
}

// itemParser reads an item's text, a line at a time.
type itemParser struct {
	text  string
	off   int // where the current line starts
	line  int // its number in the file
	alloc *nodeAlloc
}

// keyValue reads "key: value" from ln, the key at column col (from 0),
// and what may follow the value: spaces, and a comment after one.
func (p *itemParser) keyValue(ln string, col int) (k, v *yaml.Node, ok bool) {
	j := col
	for j < len(ln) && (isLower(ln[j]) || ln[j] == '_' || j > col && isDigit(ln[j])) {
		j++
	}
	// A key is short: YAML bounds a simple key at 1024 characters.
	if j == col || j-col > 64 || j+1 >= len(ln) || ln[j] != ':' || ln[j+1] != ' ' {
		return nil, nil, false
	}
	k = p.key(ln[col:j], col)
	j += 2
	for j < len(ln) && ln[j] == ' ' {
		j++
	}
	if j == len(ln) {
		return nil, nil, false // no value: a null, or a block on the lines below
	}
	var rest string
	switch ln[j] {
	case '"', '\'':
		v, rest, ok = p.quoted(ln, j)
	case '[':
		v, rest, ok = p.flowList(ln, j)
	default:
		v, rest, ok = p.plain(ln, j)
	}
	return k, v, ok && restIsComment(rest)
}

// scalar makes the node of a scalar of the given style at column col,
// its tag as yaml.v3 resolves it.
func (p *itemParser) scalar(value string, col int, style yaml.Style) *yaml.Node {
	tag := "!!str"
	if style == 0 {
		tag = plainTag(value)
	}
	return p.alloc.node(yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value, Style: style, Line: p.line, Column: col + 1})
}

// plainTag is the tag yaml.v3's parser resolves for a plain scalar. Its
// resolve takes one whose first character is none of these for a string
// at once.
func plainTag(value string) string {
	if strings.IndexByte("+-.0123456789yYnNtTfFoO~<", value[0]) < 0 {
		return "!!str"
	}
	return (&yaml.Node{Kind: yaml.ScalarNode, Value: value}).ShortTag()
}

// key makes the node of a key (a plain scalar) at column col; a key's
// tag is resolved once per parse.
func (p *itemParser) key(name string, col int) *yaml.Node {
	tag, ok := p.alloc.tags[name]
	if !ok {
		tag = plainTag(name)
		if p.alloc.tags == nil {
			p.alloc.tags = map[string]string{}
		}
		p.alloc.tags[name] = tag
	}
	return p.alloc.node(yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: name, Line: p.line, Column: col + 1})
}

// quoted reads the quoted scalar at ln[j], which holds no escape, no
// quote of its kind and nothing but printable ASCII.
func (p *itemParser) quoted(ln string, j int) (*yaml.Node, string, bool) {
	q := ln[j]
	end := j + 1
	for end < len(ln) && ln[end] != q {
		if c := ln[end]; c < 0x20 || c > 0x7e || c == '\\' {
			return nil, "", false
		}
		end++
	}
	if end == len(ln) {
		return nil, "", false // it goes on over the next line
	}
	style := yaml.DoubleQuotedStyle
	if q == '\'' {
		style = yaml.SingleQuotedStyle
	}
	return p.scalar(ln[j+1:end], j, style), ln[end+1:], true
}

// flowList reads a flow list of one or more quoted scalars at ln[j].
func (p *itemParser) flowList(ln string, j int) (*yaml.Node, string, bool) {
	seq := p.alloc.node(yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle, Line: p.line, Column: j + 1, Content: p.alloc.list(1)})
	rest := ln[j+1:]
	for {
		at := len(ln) - len(rest) + countSpaces(rest)
		if at == len(ln) || ln[at] != '"' && ln[at] != '\'' {
			return nil, "", false
		}
		n, after, ok := p.quoted(ln, at)
		if !ok {
			return nil, "", false
		}
		seq.Content = append(seq.Content, n)
		after = after[countSpaces(after):]
		switch {
		case len(after) > 0 && after[0] == ',':
			rest = after[1:]
		case len(after) > 0 && after[0] == ']':
			return seq, after[1:], true
		default:
			return nil, "", false
		}
	}
}

// plain reads the plain scalar at ln[j]: words of letters, digits and
// _ . / * + - @ = ~ % $, the first starting with a letter, a digit, _ or
// /, separated by spaces; trailing spaces are not part of it.
func (p *itemParser) plain(ln string, j int) (*yaml.Node, string, bool) {
	if c := ln[j]; !isLower(c|0x20) && !isDigit(c) && c != '_' && c != '/' {
		return nil, "", false
	}
	end, last := j, j
	for ; end < len(ln); end++ {
		switch c := ln[end]; {
		case c == ' ':
			if end+1 < len(ln) && ln[end+1] == '#' {
				return p.scalar(ln[j:last], j, 0), ln[end:], true
			}
			continue
		case isLower(c | 0x20), isDigit(c), strings.IndexByte("_./*+-@=~%$", c) >= 0:
			last = end + 1
			continue
		}
		return nil, "", false
	}
	return p.scalar(ln[j:last], j, 0), ln[last:], true
}

// restIsComment reports whether what follows a value on its line is
// nothing, spaces, or a comment after a space (of printable ASCII, as
// the whole item is: yaml.v3 refuses some other characters anywhere).
func restIsComment(rest string) bool {
	sp := countSpaces(rest)
	return sp == len(rest) || sp > 0 && rest[sp] == '#' && printable(rest)
}

// printable reports whether s is printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func countSpaces(s string) int {
	n := 0
	for n < len(s) && s[n] == ' ' {
		n++
	}
	return n
}

func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
