package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fencecron/fencecron/jobs"
)

// decoder walks a YAML node tree into the tagged types of this package
// (and jobs.Spec), and collects every problem with its position instead of
// stopping at the first. The yaml tags are the schema: one generic walk
// decodes every section, so no field is declared twice. What a field's Go
// type decides:
//
//   - string: a scalar (null is "");
//   - bool: true or false;
//   - int: a whole number (0x and _ allowed);
//   - int64: a size in bytes, optionally with a unit (16MiB, 1GB);
//   - time.Duration and jobs.Duration: a Go duration such as 90s, or one
//     starting with whole days (30d, 1d12h);
//   - []string: a list of strings; map[string]string: names to strings;
//   - a slice of structs: a list of mappings (store.retention);
//   - a struct: a mapping of its tagged fields (",inline" embeds one).
//
// A null value leaves a field at its default (a string becomes ""). It
// records where every field, list element and map entry was written, so
// that checks after decoding report problems at their file:line:column.
type decoder struct {
	file   string
	probs  []Problem
	lookup func(string) (string, bool)
	// envUsed are the variables ${NAME} referred to.
	envUsed map[string]bool
	// failed holds the paths already reported, so that later checks of
	// the same value stay quiet.
	failed map[string]bool
	// literals are the secrets written literally (see secretFields).
	literals []Problem
	// values and keys are the value and key nodes of every field, list
	// element and map entry decoded, by path ("node.ports.http",
	// "node.join[1]"); values[""] is the root. Those inside a job are
	// not recorded (see find).
	values, keys map[string]*yaml.Node
	// jobNodes are the nodes of the jobs list, by index (nil for an item
	// decoded as it was parsed: see jobNode); inJobs is set while they
	// are decoded.
	jobNodes []*yaml.Node
	inJobs   bool
	// cur is the node of job curIndex, while a part decodes it from
	// nodes it drops after (see parsePart); decoded is the jobs list so
	// decoded, and builds a node of jobNodes that is not kept when a
	// problem asks for it.
	cur      *yaml.Node
	curIndex int
	decoded  *decodedJobs
	// jobPos is where each checked job's name is written.
	jobPos []Pos
	// unsetOK turns a ${NAME} that is not set into an entry of unset
	// rather than a problem; the field stays at its default and is not
	// checked further (see LoadAllowUnset).
	unsetOK bool
	unset   []Problem
}

func newDecoder(file string, lookup func(string) (string, bool)) *decoder {
	return &decoder{
		file: file, lookup: lookup,
		envUsed: map[string]bool{}, failed: map[string]bool{},
		values: map[string]*yaml.Node{}, keys: map[string]*yaml.Node{},
	}
}

// Per-field knowledge the Go types do not carry, by field path with list
// indexes left out.
var (
	// envSections are the sections where ${NAME} is expanded.
	envSections = map[string]bool{SectionNode: true, SectionCluster: true, SectionStore: true, SectionAPI: true, SectionNotify: true, SectionTelemetry: true}
	// secretFields hold secrets: written literally, they earn a warning
	// suggesting the ${NAME} given here instead.
	secretFields = map[string]string{
		"cluster.secret":          "${FENCECRON_SECRET}",
		"cluster.previous_secret": "${FENCECRON_PREVIOUS_SECRET}",
		"api.token":               "${FENCECRON_API_TOKEN}",
		"notify.password":         "${FENCECRON_SMTP_PASSWORD}",
	}
	// listHints complete "expected a list of strings" where the form of
	// the list is worth showing.
	listHints = map[string]string{
		"node.join":         " (host:port gossip addresses)",
		"api.allowed_hosts": " (host names, or host:port)",
		"jobs.command":      ` such as ["/usr/bin/report", "--month", "previous"]; for a command line use shell:`,
	}
)

// errorf reports a problem with the value at path, and marks it failed.
func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.failed[path] = true
	d.problem(n, path, format, args...)
}

// problem reports a problem at path that leaves the value there standing
// (a duplicate key: the first one counts, and is still checked).
func (d *decoder) problem(n *yaml.Node, path, format string, args ...any) {
	p := Problem{Pos: Pos{File: d.file}, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.probs = append(d.probs, p)
}

// has reports whether the file wrote the field at path.
func (d *decoder) has(path string) bool {
	n, _ := d.find(path)
	return n != nil
}

// isMapping reports whether the file wrote the field at path as a mapping
// (or null, an empty one).
func (d *decoder) isMapping(path string) bool {
	n, _ := d.find(path)
	return n != nil && (n.Kind == yaml.MappingNode || isNull(n))
}

// find returns the value and key nodes of the field, list element or map
// entry at path, or nil if the file did not write it. A file of 100,000
// jobs has half a million fields, and only those of a job with a problem
// are ever looked up: so the fields inside a job are found in the tree
// when asked for, the first of duplicate keys as the decoder takes it,
// rather than recorded as they are decoded.
func (d *decoder) find(path string) (val, key *yaml.Node) {
	if v := d.values[path]; v != nil {
		return v, d.keys[path]
	}
	rest, ok := strings.CutPrefix(path, SectionJobs+"[")
	if !ok {
		return nil, nil
	}
	num, rest, _ := strings.Cut(rest, "]")
	switch i, err := strconv.Atoi(num); {
	case err != nil || i < 0:
		return nil, nil
	case d.cur != nil && i == d.curIndex:
		val = d.cur
	case i < len(d.jobNodes):
		val = d.jobNode(i)
	default:
		return nil, nil
	}
	if rest != "" && val.Kind != yaml.MappingNode {
		return nil, nil // an alias or not a job: nothing in it decoded
	}
	for rest != "" {
		switch {
		case rest[0] == '[' && val.Kind == yaml.SequenceNode:
			num, after, _ := strings.Cut(rest[1:], "]")
			i, err := strconv.Atoi(num)
			if err != nil || i < 0 || i >= len(val.Content) {
				return nil, nil
			}
			val, key, rest = val.Content[i], nil, after
		case rest[0] == '.' && val.Kind == yaml.MappingNode:
			k, v := lookupKey(val, rest[1:])
			if k == nil {
				return nil, nil
			}
			val, key, rest = v, k, rest[1+len(k.Value):]
		default:
			return nil, nil
		}
	}
	return val, key
}

// indexPath is the path of element i of the list at path ("jobs[3]"):
// written for every job and every element of its lists, without fmt's
// boxing of each argument.
func indexPath(path string, i int) string {
	var num [20]byte
	return path + "[" + string(strconv.AppendInt(num[:0], int64(i), 10)) + "]"
}

// lookupKey finds the entry of mapping n that the path rest starts
// with: the key that is all of rest, or else the longest followed by "."
// or "["; the first of duplicate keys.
func lookupKey(n *yaml.Node, rest string) (key, val *yaml.Node) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode {
			continue
		}
		switch {
		case k.Value == rest:
			return k, n.Content[i+1]
		case (key == nil || len(k.Value) > len(key.Value)) && len(rest) > len(k.Value) &&
			strings.HasPrefix(rest, k.Value) && (rest[len(k.Value)] == '.' || rest[len(k.Value)] == '['):
			key, val = k, n.Content[i+1]
		}
	}
	return key, val
}

// at returns where the field at path was written or, if it was not, its
// nearest enclosing field that was: a problem with a field the file left
// out is reported at the mapping that lacks it.
func (d *decoder) at(path string) *yaml.Node {
	for {
		if n, _ := d.find(path); n != nil {
			return n
		}
		if path == "" {
			return nil
		}
		path = parent(path)
	}
}

// keyAt returns the key node of a field or map entry, or at(path).
func (d *decoder) keyAt(path string) *yaml.Node {
	if _, k := d.find(path); k != nil {
		return k
	}
	return d.at(path)
}

// decodeRoot decodes the top level into doc.
func (d *decoder) decodeRoot(root *yaml.Node, doc *sections) {
	d.values[""] = root
	d.decode(root, "", reflect.ValueOf(doc).Elem())
}

var (
	durationType     = reflect.TypeFor[time.Duration]()
	jobsDurationType = reflect.TypeFor[jobs.Duration]()
	jobListType      = reflect.TypeFor[[]jobEntry]()
)

// decode decodes n into v, which its Go type says how to read (see
// decoder).
func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	t := v.Type()
	switch {
	case t == durationType || t == jobsDurationType:
		d.duration(n, path, v)
	case t == jobListType:
		d.jobList(n, path, v.Addr().Interface().(*[]jobEntry))
	case t.Kind() == reflect.String:
		d.str(n, path, v)
	case t.Kind() == reflect.Bool:
		d.boolean(n, path, v)
	case t.Kind() == reflect.Int:
		d.integer(n, path, v)
	case t.Kind() == reflect.Int64:
		d.size(n, path, v)
	case t.Kind() == reflect.Float64:
		d.float(n, path, v)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		d.strings(n, path, v)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Int:
		d.ints(n, path, v)
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		// An optional section (a job's http:): set when written, even
		// empty, so that its checks report what it lacks.
		p := reflect.New(t.Elem())
		d.mapping(n, path, p.Elem())
		v.Set(p)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String:
		d.stringMap(n, path, v)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		d.structList(n, path, v)
	case t.Kind() == reflect.Struct:
		d.mapping(n, path, v)
	default:
		panic(fmt.Sprintf("config: %s: no decoder for %s", path, t))
	}
}

// field is one key a mapping accepts: its name and the index of the Go
// field it decodes into.
type field struct {
	name  string
	index []int
}

var fieldCache sync.Map // reflect.Type -> []field

// fieldsOf returns the fields of struct type t that its yaml tags name,
// in order, with ",inline" structs' fields in their place. An exported
// field without a yaml tag is a programming error ("-" leaves one out).
func fieldsOf(t reflect.Type) []field {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.([]field)
	}
	var out []field
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag, ok := sf.Tag.Lookup("yaml")
		if !ok {
			panic(fmt.Sprintf("config: field %s.%s has no yaml tag", t, sf.Name))
		}
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case name == "-":
		case opts == "inline" && sf.Type.Kind() == reflect.Struct:
			for _, f := range fieldsOf(sf.Type) {
				out = append(out, field{f.name, append([]int{i}, f.index...)})
			}
		default:
			out = append(out, field{name, []int{i}})
		}
	}
	fieldCache.Store(t, out)
	return out
}

// mapping decodes a mapping node into struct v field by field. It reports
// keys v has no field for, duplicate keys and aliases. A null node is an
// empty mapping.
func (d *decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	fields := fieldsOf(v.Type())
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping of %s, got %s", fieldNames(fields), describe(n))
		return
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "expected a field name, got %s", describe(k))
			continue
		}
		key := k.Value
		sub := join(path, key)
		if first, dup := seen[key]; dup {
			d.problem(k, sub, "duplicate field (first on line %d)", first.Line)
			continue
		}
		fi := slices.IndexFunc(fields, func(f field) bool { return f.name == key })
		if fi < 0 {
			msg := fmt.Sprintf("unknown field %q", key)
			if s := suggest(key, fields); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else {
				msg += "; expected one of " + fieldNames(fields)
			}
			d.errorf(k, path, "%s", msg)
			continue
		}
		seen[key] = val
		d.record(sub, val, k)
		if val.Kind == yaml.AliasNode {
			d.errorf(val, sub, "aliases (*%s) are not supported; write the value out", val.Value)
			continue
		}
		d.decode(val, sub, v.FieldByIndex(fields[fi].index))
	}
}

// record remembers where the field at path was written, but for those
// inside a job (see find).
func (d *decoder) record(path string, val, key *yaml.Node) {
	if d.inJobs {
		return
	}
	d.values[path] = val
	if key != nil {
		d.keys[path] = key
	}
}

// scalar returns the text of a scalar node, ${}-expanded in the sections
// that expand. ok is false (and a problem recorded) for anything else.
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "expected %s, got %s", want, describe(n))
		return "", false
	}
	if isNull(n) {
		return "", true
	}
	if !envSections[section(path)] {
		return n.Value, true
	}
	s, err := expandEnv(n.Value, d.lookup, d.envUsed)
	if errors.Is(err, errEnvUnset) && d.unsetOK {
		d.failed[path] = true
		d.unset = append(d.unset, Problem{Pos: Pos{File: d.file, Line: n.Line, Column: n.Column}, Path: path, Msg: err.Error()})
		return "", false
	}
	if err != nil {
		d.errorf(n, path, "%v", err)
		return "", false
	}
	return s, true
}

// str decodes a string, and remembers a secret written literally.
func (d *decoder) str(n *yaml.Node, path string, v reflect.Value) {
	if s, ok := d.scalar(n, path, "a string"); ok {
		v.SetString(s)
	}
	if ref, secret := secretFields[path]; secret && n.Kind == yaml.ScalarNode && !isNull(n) && literalSecret(n.Value) {
		d.literals = append(d.literals, Problem{Pos: Pos{File: d.file, Line: n.Line, Column: n.Column}, Path: path, Msg: ref})
	}
}

// boolean decodes true or false.
func (d *decoder) boolean(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.scalar(n, path, "true or false")
	if !ok || s == "" {
		return
	}
	switch s {
	case "true", "True", "TRUE":
		v.SetBool(true)
	case "false", "False", "FALSE":
		v.SetBool(false)
	default:
		d.errorf(n, path, "expected true or false, got %q", s)
	}
}

// integer decodes a whole number.
func (d *decoder) integer(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.scalar(n, path, "an integer")
	if !ok || s == "" {
		return
	}
	i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 32)
	if err != nil {
		d.errorf(n, path, "expected an integer, got %q", s)
		return
	}
	v.SetInt(i)
}

// float decodes a number.
func (d *decoder) float(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.scalar(n, path, "a number")
	if !ok || s == "" {
		return
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		d.errorf(n, path, "expected a number, got %q", s)
		return
	}
	v.SetFloat(f)
}

// size decodes a byte count: a whole number, optionally with a unit
// B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024).
func (d *decoder) size(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.scalar(n, path, "a size in bytes")
	if !ok || s == "" {
		return
	}
	b, err := parseSize(s)
	if err != nil {
		d.errorf(n, path, "expected a size in bytes such as 1048576 or 16MiB, got %q", s)
		return
	}
	v.SetInt(b)
}

// duration decodes a Go duration such as 90s, or one starting with
// whole days (jobs.ParseDuration).
func (d *decoder) duration(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.scalar(n, path, "a duration")
	if !ok || s == "" {
		return
	}
	dur, err := jobs.ParseDuration(s)
	if err != nil {
		hint := ""
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			hint = " (a unit is required)"
		}
		d.errorf(n, path, "expected a duration such as 90s, 10m or 30d, got %q%s", s, hint)
		return
	}
	v.SetInt(int64(dur))
}

// strings decodes a list of strings.
func (d *decoder) strings(n *yaml.Node, path string, v reflect.Value) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list of strings%s, got %s", listHints[schemaPath(path)], describe(n))
		return
	}
	// An element that does not decode stays "", so that the others keep
	// their index (and position) for the checks.
	out := make([]string, len(n.Content))
	for i, e := range n.Content {
		sub := indexPath(path, i)
		d.record(sub, e, nil)
		out[i], _ = d.scalar(e, sub, "a string")
	}
	v.Set(reflect.ValueOf(out).Convert(v.Type()))
}

// ints decodes a list of whole numbers.
func (d *decoder) ints(n *yaml.Node, path string, v reflect.Value) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list of integers, got %s", describe(n))
		return
	}
	out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, e := range n.Content {
		sub := indexPath(path, i)
		d.record(sub, e, nil)
		d.integer(e, sub, out.Index(i))
	}
	v.Set(out)
}

// structList decodes a list of mappings, each into one element.
func (d *decoder) structList(n *yaml.Node, path string, v reflect.Value) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list of mappings (%s), got %s", fieldNames(fieldsOf(v.Type().Elem())), describe(n))
		return
	}
	if len(n.Content) == 0 {
		return // [] is the default: none
	}
	out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, e := range n.Content {
		sub := indexPath(path, i)
		d.record(sub, e, nil)
		if e.Kind == yaml.AliasNode {
			d.errorf(e, sub, "aliases (*%s) are not supported; write the value out", e.Value)
			continue
		}
		d.mapping(e, sub, out.Index(i))
	}
	v.Set(out)
}

// stringMap decodes a mapping of names to strings.
func (d *decoder) stringMap(n *yaml.Node, path string, v reflect.Value) {
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
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "expected a name, got %s", describe(k))
			continue
		}
		sub := join(path, k.Value)
		if line, dup := lines[k.Value]; dup {
			d.problem(k, sub, "duplicate key (first on line %d)", line)
			continue
		}
		lines[k.Value] = k.Line
		d.record(sub, val, k)
		if s, ok := d.scalar(val, sub, "a string"); ok {
			out[k.Value] = s
		}
	}
	v.Set(reflect.ValueOf(out).Convert(v.Type()))
}

// jobList decodes the jobs section: a list of jobs, each a mapping.
func (d *decoder) jobList(n *yaml.Node, path string, dst *[]jobEntry) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list of jobs, got %s", describe(n))
		return
	}
	if path == SectionJobs {
		// Found by find rather than recorded.
		d.jobNodes, d.inJobs = n.Content, true
		defer func() { d.inJobs = false }()
	}
	if d.inJobs && d.decoded != nil && d.decoded.seq == n {
		d.takeDecoded(dst)
		return
	}
	// Sized once: a jobEntry is some 500 bytes, and 100,000 of them
	// grown by doubling would be copied over and over.
	*dst = slices.Grow(*dst, len(n.Content))
	if d.inJobs && len(n.Content) >= parallelJobs {
		d.jobsInParallel(n.Content, path, dst)
		return
	}
	for i, jn := range n.Content {
		p := indexPath(path, i)
		d.record(p, jn, nil)
		// Decoded in place: a jobEntry of its own would escape to the
		// heap through reflect, one more allocation of its size per job.
		*dst = append(*dst, jobEntry{path: p, line: jn.Line})
		if !d.job(jn, &(*dst)[len(*dst)-1]) {
			*dst = (*dst)[:len(*dst)-1]
		}
	}
}

// job decodes jn into e, whose path and line are set; it reports whether
// jn is a job at all (a mapping).
func (d *decoder) job(jn *yaml.Node, e *jobEntry) bool {
	p := e.path
	switch {
	case jn.Kind == yaml.AliasNode:
		d.errorf(jn, p, "aliases (*%s) are not supported; write the job out", jn.Value)
		return false
	case jn.Kind != yaml.MappingNode:
		d.errorf(jn, p, "expected a job (a mapping with name, schedule, command, ...), got %s", describe(jn))
		return false
	}
	d.mapping(jn, p, reflect.ValueOf(e).Elem())
	e.namePos = Pos{File: d.file}
	if n := d.at(p + ".name"); n != nil {
		e.namePos.Line, e.namePos.Column = n.Line, n.Column
	}
	switch one, many := d.has(p+".schedule"), d.has(p+".schedules"); {
	case one && many:
		d.errorf(d.at(p+".schedules"), p+".schedules", "give schedule or schedules, not both")
	case one:
		e.Schedules = []string{e.Schedule}
	}
	return true
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

// parent returns the path of the field that holds path: "node" for
// "node.ports", "node.join" for "node.join[1]", "" for "node".
func parent(path string) string {
	if i := strings.LastIndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return ""
}

// section returns the section a path is in.
func section(path string) string {
	if i := strings.IndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return path
}

// listIndex matches the list indexes of a path.
var listIndex = regexp.MustCompile(`\[\d+\]`)

// schemaPath returns path with its list indexes left out: "jobs.command"
// for "jobs[2].command".
func schemaPath(path string) string { return listIndex.ReplaceAllString(path, "") }

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
