package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// decoder walks a YAML node tree into Go values and collects every
// problem with its position instead of stopping at the first.
type decoder struct {
	file   string
	probs  []Problem
	lookup func(string) (string, bool)
	// expand turns ${NAME} expansion on (node, cluster, store sections).
	expand  bool
	envUsed map[string]bool
	// failed holds the paths already reported, so that later checks of
	// the same value stay quiet.
	failed map[string]bool
	// literals are the secrets written literally (see decoder.secret).
	literals []Problem
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	if d.failed == nil {
		d.failed = map[string]bool{}
	}
	d.failed[path] = true
	p := Problem{Pos: Pos{File: d.file}, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.probs = append(d.probs, p)
}

// field is one key a mapping accepts, and how to decode its value.
type field struct {
	name   string
	decode func(v *yaml.Node, path string)
}

// mapping decodes a mapping node field by field. It reports keys that
// are not in fields, duplicate keys and aliases, and returns the value
// node of every key it accepted. A null node is an empty mapping.
func (d *decoder) mapping(n *yaml.Node, path string, fields []field) map[string]*yaml.Node {
	seen := map[string]*yaml.Node{}
	if isNull(n) {
		return seen
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping of %s, got %s", fieldNames(fields), describe(n))
		return seen
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "expected a field name, got %s", describe(k))
			continue
		}
		key := k.Value
		sub := join(path, key)
		if first, dup := seen[key]; dup {
			d.errorf(k, sub, "duplicate field (first on line %d)", first.Line)
			continue
		}
		var fn func(*yaml.Node, string)
		for _, f := range fields {
			if f.name == key {
				fn = f.decode
			}
		}
		if fn == nil {
			msg := fmt.Sprintf("unknown field %q", key)
			if s := suggest(key, fields); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else {
				msg += "; expected one of " + fieldNames(fields)
			}
			d.errorf(k, path, "%s", msg)
			continue
		}
		seen[key] = v
		if v.Kind == yaml.AliasNode {
			d.errorf(v, sub, "aliases (*%s) are not supported; write the value out", v.Value)
			continue
		}
		fn(v, sub)
	}
	return seen
}

// scalar returns the text of a scalar node, ${}-expanded where that is
// on. ok is false (and a problem recorded) for anything else.
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "expected %s, got %s", want, describe(n))
		return "", false
	}
	if isNull(n) {
		return "", true
	}
	if !d.expand {
		return n.Value, true
	}
	s, err := expandEnv(n.Value, d.lookup, d.envUsed)
	if err != nil {
		d.errorf(n, path, "%v", err)
		return "", false
	}
	return s, true
}

// str decodes a string.
func (d *decoder) str(dst *string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		if s, ok := d.scalar(n, path, "a string"); ok {
			*dst = s
		}
	}
}

// boolean decodes true or false; null leaves dst alone.
func (d *decoder) boolean(dst *bool) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path, "true or false")
		if !ok || s == "" {
			return
		}
		switch s {
		case "true", "True", "TRUE":
			*dst = true
		case "false", "False", "FALSE":
			*dst = false
		default:
			d.errorf(n, path, "expected true or false, got %q", s)
		}
	}
}

// integer decodes a whole number; null leaves dst alone.
func (d *decoder) integer(dst *int) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path, "an integer")
		if !ok || s == "" {
			return
		}
		v, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 32)
		if err != nil {
			d.errorf(n, path, "expected an integer, got %q", s)
			return
		}
		*dst = int(v)
	}
}

// size decodes a byte count: a whole number, optionally with a unit
// B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024).
func (d *decoder) size(dst *int64) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path, "a size in bytes")
		if !ok || s == "" {
			return
		}
		v, err := parseSize(s)
		if err != nil {
			d.errorf(n, path, "expected a size in bytes such as 1048576 or 16MiB, got %q", s)
			return
		}
		*dst = v
	}
}

// duration decodes a Go duration such as 90s; null leaves dst alone.
func (d *decoder) duration(dst *time.Duration) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path, "a duration")
		if !ok || s == "" {
			return
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			hint := ""
			if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
				hint = " (a unit is required)"
			}
			d.errorf(n, path, "expected a Go duration such as 90s or 10m, got %q%s", s, hint)
			return
		}
		*dst = v
	}
}

// strings decodes a sequence of strings.
func (d *decoder) strings(dst *[]string, hint string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		if isNull(n) {
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "expected a list of strings%s, got %s", hint, describe(n))
			return
		}
		out := make([]string, 0, len(n.Content))
		for i, e := range n.Content {
			s, ok := d.scalar(e, fmt.Sprintf("%s[%d]", path, i), "a string")
			if ok {
				out = append(out, s)
			}
		}
		*dst = out
	}
}

// stringMap decodes a mapping of strings to strings.
func (d *decoder) stringMap(dst *map[string]string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		if isNull(n) {
			return
		}
		if n.Kind != yaml.MappingNode {
			d.errorf(n, path, "expected a mapping of names to strings, got %s", describe(n))
			return
		}
		out := map[string]string{}
		lines := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				d.errorf(k, path, "expected a name, got %s", describe(k))
				continue
			}
			sub := join(path, k.Value)
			if line, dup := lines[k.Value]; dup {
				d.errorf(k, sub, "duplicate key (first on line %d)", line)
				continue
			}
			lines[k.Value] = k.Line
			if s, ok := d.scalar(v, sub, "a string"); ok {
				out[k.Value] = s
			}
		}
		*dst = out
	}
}

// envRef matches one ${NAME} reference.
var envRef = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces each ${NAME} in s with the variable's value. "$${"
// stands for a literal "${"; any other "$" is kept as it is. A variable
// that is not set is an error; one set to "" expands to "".
func expandEnv(s string, lookup func(string) (string, bool), used map[string]bool) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			m := envRef.FindStringSubmatch(s[i:])
			if m == nil {
				return "", fmt.Errorf("bad variable reference at %q: want ${NAME} (write $${ for a literal ${)", clip(s[i:], 20))
			}
			v, ok := lookup(m[1])
			if !ok {
				return "", fmt.Errorf("environment variable %s is not set", m[1])
			}
			if used != nil {
				used[m[1]] = true
			}
			b.WriteString(v)
			i += len(m[0])
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

// parseSize reads "1048576", "64KiB", "16MiB", "1GB".
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil {
		return 0, err
	}
	if v != 0 && (v*mult/mult != v) {
		return 0, fmt.Errorf("%s: too large", s)
	}
	return v * mult, nil
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	return fmt.Sprintf("%q", clip(n.Value, 40))
}

func fieldNames(fields []field) string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

// suggest returns the accepted field closest to key, if it is close.
func suggest(key string, fields []field) string {
	best, bestDist := "", 3
	for _, f := range fields {
		if d := editDistance(strings.ToLower(key), f.name); d < bestDist {
			best, bestDist = f.name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance, for "did you mean".
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
