package applycache

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// items returns n item texts and their entries, as a file of n jobs has.
func items(n int) ([]ID, []Entry) {
	ids := make([]ID, n)
	entries := make([]Entry, n)
	for i := range n {
		ids[i] = IDOf(fmt.Appendf(nil, "  - name: job-%d\n    schedule: \"@daily\"\n", i))
		entries[i] = Entry{Name: fmt.Sprintf("job-%d", i), Digest: fmt.Sprintf("%016x", i*7919)}
	}
	return ids, entries
}

// The next apply of a file finds what the last one saved, for the same
// frame only; a job saved without a name (one whose check reads a file)
// is not known.
func TestCache_KnowsWhatTheLastApplySaved(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	head, tail := []byte("jobs:\n"), []byte("")
	file := filepath.Join(t.TempDir(), "jobs.yaml")
	ids, entries := items(1000)
	entries[7] = Entry{} // not to be kept
	if err := Open(file, head, tail).Save(ids, entries); err != nil {
		t.Fatal(err)
	}
	c := Open(file, head, tail)
	if c.Len() != 999 {
		t.Fatalf("the cache knows %d items, want 999", c.Len())
	}
	for i, id := range ids {
		got, ok := c.Get(id)
		if i == 7 {
			if ok {
				t.Errorf("item 7, saved without a name, is known as %+v", got)
			}
			continue
		}
		if !ok || got != entries[i] {
			t.Errorf("item %d: %+v, %v; want %+v", i, got, ok, entries[i])
		}
	}
	if c := Open(file, []byte("store: {max_body_bytes: 10}\njobs:\n"), tail); c.Len() != 0 {
		t.Errorf("a cache of another frame knows %d items", c.Len())
	}
	if c := Open(file+".other", head, tail); c.Len() != 0 {
		t.Errorf("the cache of another file knows %d items", c.Len())
	}
}

// A cache file that is cut short or changed by one byte is no cache.
func TestCache_DamagedIsEmpty(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	head, tail := []byte("jobs:\n"), []byte("")
	file := filepath.Join(t.TempDir(), "jobs.yaml")
	ids, entries := items(100)
	c := Open(file, head, tail)
	if err := c.Save(ids, entries); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(c.path)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"cut short":       good[:len(good)-1],
		"a byte changed":  append(append([]byte{}, good[:100]...), append([]byte{good[100] ^ 1}, good[101:]...)...),
		"empty":           nil,
		"only the header": good[:len(magic)+36],
	} {
		if err := os.WriteFile(c.path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if n := Open(file, head, tail).Len(); n != 0 {
			t.Errorf("%s: the cache knows %d items", name, n)
		}
	}
}

// However many files are applied, at most maxFiles caches are kept.
func TestCache_Bounded(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	ids, entries := items(10)
	dir := t.TempDir()
	for i := range maxFiles + 5 {
		if err := Open(filepath.Join(dir, fmt.Sprintf("jobs-%d.yaml", i)), []byte("jobs:\n"), nil).Save(ids, entries); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadDir(filepath.Join(cache, "fencecron", "apply"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != maxFiles {
		t.Errorf("%d cache files after %d files applied; want %d", len(got), maxFiles+5, maxFiles)
	}
	if c := Open(filepath.Join(dir, fmt.Sprintf("jobs-%d.yaml", maxFiles+4)), []byte("jobs:\n"), nil); c.Len() != 10 {
		t.Errorf("the cache of the file applied last knows %d items, want 10", c.Len())
	}
}
