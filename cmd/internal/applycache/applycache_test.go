package applycache

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
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

// entryOf is Save's fresh for entries: item i is job entries[i].
func entryOf(entries []Entry) func(int) Entry {
	return func(i int) Entry { return entries[i] }
}

// cacheOf is a file, in a cache directory of the test's own, and the IDs
// and entries of n items.
func cacheOf(t *testing.T, n int) (file string, ids []ID, entries []Entry) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	ids, entries = items(n)
	return filepath.Join(t.TempDir(), "jobs.yaml"), ids, entries
}

// The next apply of a file finds what the last one saved, for the same
// frame only; a job saved without a name (one whose check reads a file)
// is not known.
func TestCache_KnowsWhatTheLastApplySaved(t *testing.T) {
	head, tail := []byte("jobs:\n"), []byte("")
	file, ids, entries := cacheOf(t, 1000)
	entries[7] = Entry{} // not to be kept
	entries[8].Recheck = true
	if err := Load(file).Open(head, tail, os.LookupEnv).Save(ids, nil, entryOf(entries)); err != nil {
		t.Fatal(err)
	}
	c := Load(file).Open(head, tail, os.LookupEnv)
	if c.Len() != 999 {
		t.Fatalf("the cache knows %d items, want 999", c.Len())
	}
	for i, id := range ids {
		k := c.Find(id, -1)
		ok := k >= 0
		var got Entry
		if ok {
			got = c.At(k)
		}
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
	if c := Load(file).Open([]byte("store: {max_body_bytes: 10}\njobs:\n"), tail, os.LookupEnv); c.Len() != 0 {
		t.Errorf("a cache of another frame knows %d items", c.Len())
	}
	if c := Load(file+".other").Open(head, tail, os.LookupEnv); c.Len() != 0 {
		t.Errorf("the cache of another file knows %d items", c.Len())
	}
}

// A variable the file around the list names is part of what a cache is
// of: with another value (or unset), the cache is empty.
func TestCache_OfTheFramesVariables(t *testing.T) {
	head, tail := []byte("notify:\n  host: ${SMTP_HOST:-}\njobs:\n"), []byte("store:\n  max_body_bytes: ${MAX_BODY}\n")
	file, ids, entries := cacheOf(t, 10)
	env := map[string]string{"SMTP_HOST": "127.0.0.1", "MAX_BODY": "1000"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := Load(file).Open(head, tail, lookup).Save(ids, nil, entryOf(entries)); err != nil {
		t.Fatal(err)
	}
	if c := Load(file).Open(head, tail, lookup); c.Len() != 10 {
		t.Fatalf("with the same variables the cache knows %d items, want 10", c.Len())
	}
	delete(env, "SMTP_HOST")
	if c := Load(file).Open(head, tail, lookup); c.Len() != 0 {
		t.Errorf("with SMTP_HOST unset the cache knows %d items", c.Len())
	}
	env["SMTP_HOST"], env["MAX_BODY"] = "127.0.0.1", "2000"
	if c := Load(file).Open(head, tail, lookup); c.Len() != 0 {
		t.Errorf("with MAX_BODY changed the cache knows %d items", c.Len())
	}
}

// A cache file that is cut short or changed by one byte is no cache.
func TestCache_DamagedIsEmpty(t *testing.T) {
	head, tail := []byte("jobs:\n"), []byte("")
	file, ids, entries := cacheOf(t, 100)
	c := Load(file).Open(head, tail, os.LookupEnv)
	if err := c.Save(ids, nil, entryOf(entries)); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(c.path)
	if err != nil {
		t.Fatal(err)
	}
	// A body whose own checksum is right but whose count or name
	// length runs past its end.
	resum := func(body []byte) []byte {
		sum := sha256.Sum256(body)
		return append(body, sum[:]...)
	}
	body := append([]byte{}, good[:len(good)-sha256.Size]...)
	bigCount := append([]byte{}, body...)
	binary.LittleEndian.PutUint32(bigCount[len(body)-4:], 101)
	longName := append([]byte{}, body...)
	binary.LittleEndian.PutUint16(longName[recFixed+recHead-2:], 60000)
	for name, bad := range map[string][]byte{
		"a count past the end": resum(bigCount),
		"a name past the end":  resum(longName),
		"an entry cut off":     resum(append(append([]byte{}, body[:len(body)-7]...), body[len(body)-4:]...)),
		"cut short":            good[:len(good)-1],
		"a byte changed":       append(append([]byte{}, good[:100]...), append([]byte{good[100] ^ 1}, good[101:]...)...),
		"empty":                nil,
		"only the header":      good[:len(magic)+36],
	} {
		if err := os.WriteFile(c.path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if n := Load(file).Open(head, tail, os.LookupEnv).Len(); n != 0 {
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
		if err := Load(filepath.Join(dir, fmt.Sprintf("jobs-%d.yaml", i))).Open([]byte("jobs:\n"), nil, os.LookupEnv).Save(ids, nil, entryOf(entries)); err != nil {
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
	if c := Load(filepath.Join(dir, fmt.Sprintf("jobs-%d.yaml", maxFiles+4))).Open([]byte("jobs:\n"), nil, os.LookupEnv); c.Len() != 10 {
		t.Errorf("the cache of the file applied last knows %d items, want 10", c.Len())
	}
	// What a killed apply left goes once no write can be making it.
	stale := filepath.Join(cache, "fencecron", "apply", "x.cache.tmp-1")
	fresh := filepath.Join(cache, "fencecron", "apply", "y.cache.tmp-2")
	os.WriteFile(stale, []byte("x"), 0o600)
	os.WriteFile(fresh, []byte("x"), 0o600)
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(stale, old, old)
	if err := Load(filepath.Join(dir, "jobs-0.yaml")).Open([]byte("jobs:\n"), nil, os.LookupEnv).Save(ids, nil, entryOf(entries)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("a temporary file two hours old was kept")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a temporary file a write may still be making was removed: %v", err)
	}
}

// The base an apply recorded is found with the cache it was recorded
// for, and with no other: a cache written since, by another apply of the
// file, has none until that apply records its own.
func TestCache_BaseIsOfItsCache(t *testing.T) {
	head, tail := []byte("jobs:\n"), []byte("")
	file, ids, entries := cacheOf(t, 100)
	c := Load(file).Open(head, tail, os.LookupEnv)
	if err := c.SetBase("0123456789abcdef"); err == nil {
		t.Error("a base was recorded with no cache file")
	}
	if err := c.Save(ids, nil, entryOf(entries)); err != nil {
		t.Fatal(err)
	}
	if err := c.SetBase("0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	if got := Load(file).Open(head, tail, os.LookupEnv).Base(); got != "0123456789abcdef" {
		t.Errorf("the next apply finds base %q, want the one recorded", got)
	}
	if err := c.SetBase("not hex"); err == nil {
		t.Error("a base that is not a hash was recorded")
	}

	// The same cache, opened: its base can be recorded again.
	c = Load(file).Open(head, tail, os.LookupEnv)
	if err := c.SetBase("fedcba9876543210"); err != nil {
		t.Fatal(err)
	}
	if got := Load(file).Open(head, tail, os.LookupEnv).Base(); got != "fedcba9876543210" {
		t.Errorf("base %q, want the one recorded last", got)
	}

	// Another apply saves what the file now holds: the base is not of it.
	entries[3].Digest = "00000000000000aa"
	if err := Load(file).Open(head, tail, os.LookupEnv).Save(ids, nil, entryOf(entries)); err != nil {
		t.Fatal(err)
	}
	if got := Load(file).Open(head, tail, os.LookupEnv).Base(); got != "" {
		t.Errorf("a cache saved since has base %q, want none", got)
	}
	// Another frame finds no cache, and no base.
	if got := Load(file).Open([]byte("node:\n  name: x\njobs:\n"), tail, os.LookupEnv).Base(); got != "" {
		t.Errorf("another frame has base %q", got)
	}
}

// Find finds every item the cache knows, whatever the hint: at the hint,
// by a scan for the first few, by the index after; and no item it does
// not know.
func TestCache_FindsWhateverTheHint(t *testing.T) {
	head := []byte("jobs:\n")
	file, ids, entries := cacheOf(t, 500)
	if err := Load(file).Open(head, nil, os.LookupEnv).Save(ids, nil, entryOf(entries)); err != nil {
		t.Fatal(err)
	}
	c := Load(file).Open(head, nil, os.LookupEnv)
	unknown := IDOf([]byte("  - name: not-saved\n"))
	for i, id := range ids {
		if k := c.Find(id, i); k != i {
			t.Fatalf("item %d at its hint: found at %d", i, k)
		}
	}
	for round := range 3 * maxScans {
		i := (round * 37) % len(ids)
		if k := c.Find(ids[i], i+1); k != i {
			t.Errorf("item %d with a wrong hint, after %d such finds: found at %d", i, round, k)
		}
		if k := c.Find(unknown, i); k != -1 {
			t.Errorf("an item not saved is found at %d, after %d finds", k, round)
		}
	}
	if c.index == nil {
		t.Errorf("after %d finds away from their hint, the cache has no index", 6*maxScans)
	}
}

// A cache saved from the one read keeps the records it names as they
// were, and takes the others as fresh says.
func TestCache_SaveKeepsTheRecordsRead(t *testing.T) {
	head := []byte("jobs:\n")
	file, ids, entries := cacheOf(t, 100)
	entries[5].Recheck = true
	if err := Load(file).Open(head, nil, os.LookupEnv).Save(ids, nil, entryOf(entries)); err != nil {
		t.Fatal(err)
	}
	c := Load(file).Open(head, nil, os.LookupEnv)
	// The file now: item 10 changed, item 20 gone, one item added at the
	// end; the others where they were.
	var next []ID
	var kept []int
	want := map[ID]Entry{}
	for i, id := range ids {
		switch i {
		case 10:
			id = IDOf([]byte("  - name: job-10\n    schedule: \"@hourly\"\n"))
			next, kept = append(next, id), append(kept, -1)
			want[id] = Entry{Name: "job-10", Digest: "00000000000000aa"}
		case 20:
		default:
			next, kept = append(next, id), append(kept, c.Find(id, i))
			want[id] = entries[i]
		}
	}
	added := IDOf([]byte("  - name: new\n"))
	next, kept = append(next, added), append(kept, -1)
	want[added] = Entry{Name: "new", Digest: "00000000000000bb"}
	fresh := func(i int) Entry {
		if kept[i] >= 0 {
			t.Errorf("fresh asked for item %d, which the cache keeps", i)
		}
		return want[next[i]]
	}
	if err := c.Save(next, kept, fresh); err != nil {
		t.Fatal(err)
	}
	c = Load(file).Open(head, nil, os.LookupEnv)
	if c.Len() != len(next) {
		t.Fatalf("the cache knows %d items, want %d", c.Len(), len(next))
	}
	for i, id := range next {
		if k := c.Find(id, i); k != i || c.At(k) != want[id] {
			t.Errorf("item %d: at %d, %+v; want at %d, %+v", i, k, c.At(max(k, 0)), i, want[id])
		}
	}
	if c.Find(ids[20], 20) != -1 {
		t.Error("the item gone from the file is still known")
	}
}

// BenchmarkCache_Find100k: what a Find away from its hint costs in a
// cache of 100,000 items, by a scan and by building the index (the
// figures maxScans weighs).
func BenchmarkCache_Find100k(b *testing.B) {
	b.Setenv("XDG_CACHE_HOME", b.TempDir())
	ids, entries := items(100_000)
	file := filepath.Join(b.TempDir(), "jobs.yaml")
	if err := Load(file).Open([]byte("jobs:\n"), nil, os.LookupEnv).Save(ids, nil, entryOf(entries)); err != nil {
		b.Fatal(err)
	}
	c := Load(file).Open([]byte("jobs:\n"), nil, os.LookupEnv)
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			c.scans, c.index = 0, nil
			if c.Find(ids[99_999], 0) != 99_999 {
				b.Fatal("not found")
			}
		}
	})
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			c.scans, c.index = maxScans, nil
			if c.Find(ids[99_999], 0) != 99_999 {
				b.Fatal("not found")
			}
		}
	})
}
