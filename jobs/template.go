package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"
	texttemplate "text/template"
	"text/template/parse"
	"time"
)

// A job's output key and an HTTP job's body are Go templates, rendered
// for every run by the leader (and checked by validate and apply). Go's
// template language can loop over an integer ({{range 300000000}}), call
// templates recursively, and double a string in every statement; a job
// set is written by whoever holds the API token, and one such template
// would hold a core of every leader for as long as it likes. So the
// language is narrowed to what a key or a body needs, and what is left is
// bounded by construction:
//
//   - no range, no template, define or block, no variables but $: without
//     them a template runs each of its actions once, in order;
//   - a method is called with literal arguments only ("2006-01", 0 -1 0),
//     never with another call's result or the piped value, so no method
//     sees an argument longer than the template itself;
//   - the functions that make text (print, printf, println, html, js,
//     urlquery) are replaced by bounded ones: no result over
//     maxTemplateValue, no printf width or precision over two digits nor
//     argument index (%[1]s would repeat an argument without end), and
//     all of them together produce at most maxTemplateWork bytes;
//   - the template itself is at most MaxTemplateBytes, and its output is
//     cut at its own bound (a key's, a body's).
//
// A template that breaks a rule is refused when it is parsed, at
// validate and apply, with the rule and its line and column in the
// template; one that goes over a bound fails the render: at validate, or
// the attempt.

// Bounds of a template's execution.
const (
	// maxTemplateValue bounds one value a text function returns.
	maxTemplateValue = 64 << 10
	// maxTemplateWork bounds what the text functions of one execution
	// return in all.
	maxTemplateWork = 1 << 20
	// MaxHTTPBodyBytes bounds an HTTP job's rendered request body.
	MaxHTTPBodyBytes = 1 << 20
	// MaxTemplateBytes bounds a template's text: an output key's or a
	// body's.
	MaxTemplateBytes = 64 << 10
)

// ErrTemplateBound is wrapped by a render that went over a bound.
var ErrTemplateBound = errors.New("template over its bound")

// errOutputBound is a render's output going over its bound.
var errOutputBound = fmt.Errorf("%w: output", ErrTemplateBound)

// OutputData is what an output key template sees.
type OutputData struct {
	Job       string
	RunID     string
	Scheduled time.Time // in the job's time zone
}

// templateData is what a job's templates see for one scheduled time seen
// in loc.
func (s *Spec) templateData(scheduled time.Time, loc *time.Location) OutputData {
	return OutputData{Job: s.ShortName(), RunID: RunID(s.QualifiedName(), scheduled), Scheduled: scheduled.In(loc)}
}

// renderTemplate parses text as a template named name under the rules
// above and executes it on data, writing at most limit bytes.
func renderTemplate(name, text string, data OutputData, limit int) ([]byte, error) {
	if len(text) > MaxTemplateBytes {
		return nil, fmt.Errorf("%s template: %d bytes; a template is at most %d", name, len(text), MaxTemplateBytes)
	}
	work := 0
	t, err := texttemplate.New(name).Option("missingkey=error").Funcs(boundedFuncs(&work)).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%s template: %w", name, err)
	}
	if err := checkTemplate(t, text); err != nil {
		return nil, fmt.Errorf("%s template: %w", name, err)
	}
	w := &cappedBuffer{limit: limit}
	if err := t.Execute(w, data); err != nil {
		if errors.Is(err, errOutputBound) {
			// text/template wraps a writer's error in its own words;
			// say which bound it was.
			return nil, fmt.Errorf("%s template: %w: it renders more than %d bytes", name, ErrTemplateBound, limit)
		}
		return nil, fmt.Errorf("%s template: %w", name, err)
	}
	return w.Bytes(), nil
}

// cappedBuffer is a buffer that refuses to grow past limit.
type cappedBuffer struct {
	bytes.Buffer
	limit int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.limit {
		return 0, errOutputBound
	}
	return b.Buffer.Write(p)
}

// checkTemplate refuses a parsed template that uses what the rules above
// leave out, naming the rule and where it is in text.
func checkTemplate(t *texttemplate.Template, text string) error {
	if len(t.Templates()) > 1 {
		return errors.New("define and block are not allowed: a template here is one template")
	}
	if t.Tree == nil || t.Root == nil {
		return nil
	}
	c := templateChecker{tree: t.Tree, text: text}
	c.node(t.Root)
	return c.err
}

// templateChecker walks a template's parse tree and keeps the first rule
// broken (checkTemplate).
type templateChecker struct {
	tree *parse.Tree
	text string
	err  error
}

func (c *templateChecker) fail(n parse.Node, format string, args ...any) {
	if c.err != nil {
		return
	}
	// The place of the action the node is in: its "{{".
	line, col := 1, 1
	if pos := int(n.Position()); pos <= len(c.text) {
		before := c.text[:pos]
		if open := strings.LastIndex(before, "{{"); open >= 0 {
			before = before[:open]
		}
		line = 1 + strings.Count(before, "\n")
		col = 1 + len(before) - (strings.LastIndexByte(before, '\n') + 1)
	}
	c.err = fmt.Errorf("line %d, column %d: %s", line, col, fmt.Sprintf(format, args...))
}

func (c *templateChecker) node(n parse.Node) {
	switch n := n.(type) {
	case nil:
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, x := range n.Nodes {
			c.node(x)
		}
	case *parse.TextNode, *parse.CommentNode:
	case *parse.ActionNode:
		c.pipe(n.Pipe)
	case *parse.IfNode:
		c.branch(&n.BranchNode)
	case *parse.WithNode:
		c.branch(&n.BranchNode)
	case *parse.RangeNode:
		c.fail(n, "range is not allowed: a key or a body is rendered once per run, without loops")
	case *parse.TemplateNode:
		c.fail(n, "template is not allowed: a template here calls no other")
	default:
		c.fail(n, "%s is not allowed here", n)
	}
}

func (c *templateChecker) branch(b *parse.BranchNode) {
	c.pipe(b.Pipe)
	c.node(b.List)
	c.node(b.ElseList)
}

func (c *templateChecker) pipe(p *parse.PipeNode) {
	if p == nil {
		return
	}
	if len(p.Decl) > 0 {
		c.fail(p, "variables are not allowed: use the value where it is needed")
		return
	}
	for i, cmd := range p.Cmds {
		c.command(cmd, i > 0)
	}
}

// command checks one command of a pipeline; piped says a value is piped
// into it as its last argument.
func (c *templateChecker) command(cmd *parse.CommandNode, piped bool) {
	if len(cmd.Args) == 0 {
		return
	}
	switch first := cmd.Args[0].(type) {
	case *parse.FieldNode, *parse.ChainNode, *parse.VariableNode:
		// A field or a method of the data: its arguments, if any, must
		// be literals, and nothing may be piped into it.
		if v, ok := first.(*parse.VariableNode); ok && (len(v.Ident) == 0 || v.Ident[0] != "$") {
			c.fail(v, "variables are not allowed: use the value where it is needed")
			return
		}
		if ch, ok := first.(*parse.ChainNode); ok {
			c.arg(ch.Node)
		}
		if piped {
			c.fail(cmd, "%s: a method is not given a piped value; call it with literal arguments", first)
			return
		}
		for _, a := range cmd.Args[1:] {
			switch a.(type) {
			case *parse.StringNode, *parse.NumberNode, *parse.BoolNode, *parse.NilNode:
			default:
				c.fail(a, "%s: a method's arguments must be literals (\"2006-01\", 0, -1), not %s", first, a)
				return
			}
		}
	case *parse.IdentifierNode:
		if first.Ident == "call" {
			c.fail(first, "call is not allowed")
			return
		}
		for _, a := range cmd.Args[1:] {
			c.arg(a)
		}
	default:
		c.arg(first)
		for _, a := range cmd.Args[1:] {
			c.arg(a)
		}
	}
}

// arg checks an argument of a function (or the operand of a chain).
func (c *templateChecker) arg(a parse.Node) {
	switch a := a.(type) {
	case *parse.PipeNode:
		c.pipe(a)
	case *parse.ChainNode:
		c.arg(a.Node)
	case *parse.VariableNode:
		if len(a.Ident) == 0 || a.Ident[0] != "$" {
			c.fail(a, "variables are not allowed: use the value where it is needed")
		}
	}
}

// boundedFuncs replaces text/template's functions that make text by ones
// that stay within maxTemplateValue each and within maxTemplateWork
// together, counted in *work.
func boundedFuncs(work *int) texttemplate.FuncMap {
	spend := func(name, s string) (string, error) {
		*work += len(s)
		switch {
		case len(s) > maxTemplateValue:
			return "", fmt.Errorf("%w: %s makes a value of %d bytes; at most %d", ErrTemplateBound, name, len(s), maxTemplateValue)
		case *work > maxTemplateWork:
			return "", fmt.Errorf("%w: the template's functions make more than %d bytes", ErrTemplateBound, maxTemplateWork)
		}
		return s, nil
	}
	// Every argument is checked before formatting, so that no call
	// builds a value far larger than its bound before it is refused.
	args := func(name string, xs []any) error {
		n := 0
		for _, x := range xs {
			switch x := x.(type) {
			case string:
				n += len(x)
			case []byte: // time.Time's AppendFormat, MarshalText
				n += 6 * len(x) // %v prints a byte as up to 3 digits and a space
			}
		}
		if n > maxTemplateValue {
			return fmt.Errorf("%w: %s is given %d bytes of text; at most %d", ErrTemplateBound, name, n, maxTemplateValue)
		}
		return nil
	}
	bounded := func(name string, fn func(...any) string) func(...any) (string, error) {
		return func(xs ...any) (string, error) {
			if err := args(name, xs); err != nil {
				return "", err
			}
			return spend(name, fn(xs...))
		}
	}
	return texttemplate.FuncMap{
		"print":   bounded("print", fmt.Sprint),
		"println": bounded("println", fmt.Sprintln),
		"printf": func(format string, xs ...any) (string, error) {
			if err := args("printf", append(xs, format)); err != nil {
				return "", err
			}
			if err := checkWidths(format); err != nil {
				return "", err
			}
			return spend("printf", fmt.Sprintf(format, xs...))
		},
		"html":     bounded("html", texttemplate.HTMLEscaper),
		"js":       bounded("js", texttemplate.JSEscaper),
		"urlquery": bounded("urlquery", func(xs ...any) string { return url.QueryEscape(fmt.Sprint(xs...)) }),
	}
}

// checkWidths refuses a printf format with a width or precision of more
// than two digits, or one taken from an argument (*), or an explicit
// argument index ([n]).
func checkWidths(format string) error {
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		digits := 0
		for i++; i < len(format); i++ {
			ch := format[i]
			switch {
			case ch == '*':
				return fmt.Errorf("%w: printf: a width or precision from an argument (*) is not allowed", ErrTemplateBound)
			case ch == '0' && digits == 0:
				continue // the zero-padding flag, or a leading zero
			case ch >= '0' && ch <= '9':
				if digits++; digits > 2 {
					return fmt.Errorf("%w: printf: a width or precision of more than two digits is not allowed", ErrTemplateBound)
				}
				continue
			case ch == '.':
				digits = 0
				continue
			case ch == '[':
				return fmt.Errorf("%w: printf: an argument index ([n]) is not allowed", ErrTemplateBound)
			case strings.IndexByte("+-# ", ch) >= 0:
				continue
			}
			break
		}
	}
	return nil
}

// renderUnbounded renders text as a template with the whole of Go's
// template language and no bound: the rendering of servers before log
// version 7, which a server replaying an entry of theirs must repeat to
// decide as they did (scheduler/fsm/after.go). Nothing else calls it.
func renderUnbounded(name, text string, data OutputData) ([]byte, error) {
	t, err := texttemplate.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%s template: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("%s template: %w", name, err)
	}
	return b.Bytes(), nil
}
