package config

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// plainCases are pieces of items: values yaml.v3 reads as strings, ints,
// floats, bools, nulls or timestamps, or not at all; quoted and flow
// forms, some of which plainItem leaves to yaml.v3.
var (
	plainKeys   = []string{"name", "schedule", "command", "timeout", "y", "on", "true", "null", "yes", "n_1", "_x", "Name", "a-b", "1a"}
	plainValues = []string{
		"job-000001", "5m", "3", "-3", "+3", "0x1F", "1e3", "1.5", ".5", "1_000", "0o17", "0b101", "007", "0777",
		"true", "True", "tRUE", "yes", "no", "on", "Off", "y", "N", "null", "NULL", "~", "nan", ".nan", ".inf", "-.inf",
		"2001-12-14", "2001-12-14 21:59:43", "/bin/true", "a b", "a  b", "0 0 * * *", "*a", "a*", "@x", "x@y", "a=b",
		"$HOME", "100%", "1:30", "a#b", "a: b", "<<", "a,b", "[a]", "{a}", "-", "- a", "?", "a?", "é",
		`"x"`, `""`, `"a b"`, `"it's"`, `"#x"`, `"a: b"`, `"x\y"`, `"x`, `'x'`, `''`, `'a "b"'`, `'it''s'`,
		`["a"]`, `["a", "b"]`, `[ "a" ,'b' ]`, `[]`, `["a",]`, `[a]`, `["a"] x`, `["a"`,
	}
	plainAfter = []string{"", "", "", "  ", " # c", "#c", " #", "\t"}
	plainLines = []string{"", "   ", "# c", "      # c", "\t# c", "  x"}
)

// randomItem writes an item at indent from the pieces above.
func randomItem(r *rand.Rand, indent int) string {
	var b strings.Builder
	pad := strings.Repeat(" ", indent)
	for i := range 1 + r.IntN(4) {
		if i == 0 {
			b.WriteString(pad + "- ")
			if r.IntN(20) == 0 {
				b.WriteString(" ")
			}
		} else {
			if r.IntN(8) == 0 {
				b.WriteString(plainLines[r.IntN(len(plainLines))] + "\n")
			}
			b.WriteString(pad + "  ")
			if r.IntN(30) == 0 {
				b.WriteString(" ")
			}
		}
		sep := ": "
		switch r.IntN(20) {
		case 0:
			sep = ":"
		case 1:
			sep = ":   "
		}
		b.WriteString(plainKeys[r.IntN(len(plainKeys))] + sep + plainValues[r.IntN(len(plainValues))] + plainAfter[r.IntN(len(plainAfter))] + "\n")
	}
	if r.IntN(6) == 0 {
		b.WriteString(plainLines[r.IntN(len(plainLines))] + "\n")
	}
	return b.String()
}

// plainItem reads one item with nodes of its own.
func plainItem(text string, line, indent int) (*yaml.Node, bool) {
	var a nodeAlloc
	return a.plainItem(text, line, indent)
}

// samePlainItem reports whether plainItem reads text, the item on line
// line at indent, failing the test if yaml.v3 then does not read it to
// the same tree.
func samePlainItem(t *testing.T, text string, line, indent int) (plain bool) {
	t.Helper()
	got, ok := plainItem(text, line, indent)
	if !ok {
		return false
	}
	want := parseItems([]byte(text), []itemLine{{0, line}}, indent, true)
	if want == nil {
		t.Fatalf("plainItem read an item yaml.v3 does not:\n%s", text)
	}
	if d := sameTree(got, want[0], "item"); d != "" {
		t.Fatalf("plainItem differs from yaml.v3 at %s:\n%s", d, text)
	}
	return true
}

// An item plainItem reads is the tree yaml.v3 parses it into, whatever
// its values resolve to.
func TestPlainItem_AsYAML(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	read := 0
	for range 20000 {
		indent := 2 * r.IntN(3)
		if samePlainItem(t, randomItem(r, indent), 1+r.IntN(1000), indent) {
			read++
		}
	}
	if read < 1500 {
		t.Errorf("plainItem read %d items of 20000: the test no longer exercises it", read)
	}
	for _, item := range []string{"  - name: a\n    schedule: \"0 0 * * *\"\n    command: [\"/bin/true\"]\n", "- name: a\n\n  # c\n  x: 1\n\n"} {
		if !samePlainItem(t, item, 2, countSpaces(item)) {
			t.Errorf("not read as plain: %q", item)
		}
	}
}

// Whatever the text, an item plainItem reads is the tree yaml.v3 parses
// it into.
func FuzzPlainItem(f *testing.F) {
	r := rand.New(rand.NewPCG(13, 14))
	for range 20 {
		f.Add(randomItem(r, 2), 2)
	}
	f.Fuzz(func(t *testing.T, text string, indent int) {
		if indent < 0 || indent > 8 {
			return
		}
		samePlainItem(t, text, 5, indent)
	})
}

// BenchmarkPlainItem: one item of the shape fencebench scale writes.
func BenchmarkPlainItem(b *testing.B) {
	item := fmt.Sprintf("  - name: job-%06d\n    schedule: \"%d %d * * *\"\n    command: [\"/bin/true\"]\n", 12345, 45, 3)
	var a nodeAlloc
	for b.Loop() {
		if _, ok := a.plainItem(item, 10, 2); !ok {
			b.Fatal("not plain")
		}
	}
}
