package jobfile

import (
	"os"
	"slices"
	"sync"

	"github.com/fencecron/fencecron/cmd/internal/applycache"
	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/jobs"
)

// Set is what apply sends: each job's name and digest, in the file's
// order, and the specs it has. A set read whole has every spec; one read
// through the cache (applycache) has the specs of the items it parsed,
// and the jobs of the others by name and digest alone.
type Set struct {
	names   []string
	digests func() []string // computed once, when first asked for
	specs   []jobs.Spec     // every job's; nil if read through the cache
	parsed  map[string]int  // read through the cache: each parsed job's index in fresh
	fresh   []jobs.Spec     // read through the cache: the jobs it parsed
	changed []int           // indexes in fresh of the jobs the cache did not know
	path    string          // read through the cache: the file, its text and items
	data    []byte
	items   config.Items
	saved   func() // waits for the cache to be written
	// The cache that holds this file's jobs once saved has returned (nil
	// if none will), the hash of the set the file's last apply made, and
	// the jobs of that set the file no longer has (read through the cache):
	// what apply sends as changes (PUT /api/v1/jobset/changes).
	cache   *applycache.Cache
	base    string
	removed []string
}

// Names are the jobs' names, in the file's order.
func (s *Set) Names() []string { return s.names }

// Digests are the jobs' digests (jobs.SpecDigests), in the file's order.
func (s *Set) Digests() []string { return s.digests() }

// Specs are every job's spec, for a set read whole; nil for one read
// through the cache.
func (s *Set) Specs() []jobs.Spec { return s.specs }

// Changed are the specs of the jobs the cache did not know: those the
// file's last apply did not send.
func (s *Set) Changed() []jobs.Spec {
	specs := make([]jobs.Spec, 0, len(s.changed))
	for _, k := range s.changed {
		specs = append(specs, s.fresh[k])
	}
	return specs
}

// Base is the hash of the set the file's last apply made, if the cache
// knows it ("" if not); Removed are the jobs of that set the file no
// longer has.
func (s *Set) Base() string      { return s.base }
func (s *Set) Removed() []string { return s.removed }

// Saved waits for the cache to be written.
func (s *Set) Saved() { s.saved() }

// Learnt records, once the cache is written, that the node's set (of
// hash hash) is this file's jobs: the next apply of the file sends only
// what changed since (PUT /api/v1/jobset/changes).
func (s *Set) Learnt(hash string) {
	if s.cache != nil {
		s.saved()
		s.cache.SetBase(hash)
	}
}

func (s *Set) Len() int { return len(s.names) } // the number of jobs

// specsOf returns the specs of jobs idx (not in idx's order). A set read
// through the cache parses the items of those it did not parse, and
// checks each is the job the cache said: a node that lacks jobs the cache
// knew (it holds another file, applied since) costs the parse of those,
// not of the file. ok is false where the file is to be read whole.
func (s *Set) SpecsOf(idx []int) (specs []jobs.Spec, ok bool) {
	var more []int
	for _, i := range idx {
		switch k, ok := s.parsed[s.names[i]]; {
		case s.specs != nil:
			specs = append(specs, s.specs[i])
		case ok:
			specs = append(specs, s.fresh[k])
		default:
			more = append(more, i)
		}
	}
	if len(more) == 0 {
		return specs, true
	}
	slices.Sort(more)
	more = slices.Compact(more)
	parsed, ok := parseItems(s.path, s.items, more)
	for k, d := range jobs.SpecDigests(parsed) {
		ok = ok && parsed[k].Name == s.names[more[k]] && d == s.digests()[more[k]] && len(parsed[k].After) == 0
	}
	return append(specs, parsed...), ok
}

// whole is the set with every job's spec: s if it was read whole, else
// the text read through the cache, parsed whole.
func (s *Set) Whole() (*Set, error) {
	if s.parsed == nil {
		return s, nil
	}
	specs, _, err := Parse(s.path, s.data)
	if err != nil {
		return nil, err
	}
	return wholeSet(specs), nil
}

// wholeSet is the set of specs, read whole.
func wholeSet(specs []jobs.Spec) *Set {
	s := &Set{specs: specs, names: make([]string, len(specs)), saved: func() {}}
	for i := range specs {
		s.names[i] = specs[i].Name
	}
	s.digests = sync.OnceValue(func() []string { return jobs.SpecDigests(specs) })
	return s
}

// Load reads path as ReadSet does; a large file of the plain
// shape config.CutJobs cuts, through the cache: only the items whose
// text the last apply of the file did not see are parsed, and the
// cache learns the file as it now is. Anything the cache cannot vouch
// for has the file read whole, so what is sent is what ReadSet reads.
func Load(path string) (*Set, error) {
	// The cache is read while the file is: for 100,000 jobs each is some
	// tens of milliseconds, most of them page faults.
	cache := applycache.Load(path)
	data, items, ok := plainFile(path)
	if !ok {
		var specs []jobs.Spec
		var err error
		if data != nil {
			specs, _, err = Parse(path, data)
		} else {
			specs, err = ReadSet(path)
		}
		if err != nil {
			return nil, err
		}
		return wholeSet(specs), nil
	}
	head, tail := items.Frame()
	ids := itemIDs(items)
	c := cache.Open(head, tail, os.LookupEnv)
	if set, ok := cachedSet(path, items, ids, c); ok {
		set.data = data
		return set, nil
	}
	specs, fileOnly, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	set := wholeSet(specs)
	// A file with after: is always read whole.
	if fileOnly && len(specs) == items.Len() && !jobs.HasAfter(specs) {
		set.cache = c
		set.saved = inBackground(func() {
			digests := set.digests()
			c.Save(ids, nil, func(i int) applycache.Entry { return cacheEntry(&specs[i], digests[i]) })
		})
	}
	return set, nil
}

// itemIDs is the ID of each item, computed on every core.
func itemIDs(items config.Items) []applycache.ID {
	ids := make([]applycache.ID, items.Len())
	jobs.InParallel(len(ids), func(_, a, b int) {
		for i := a; i < b; i++ {
			ids[i] = applycache.IDOf(items.Item(i))
		}
	})
	return ids
}

// inBackground runs save, a write of the cache, while the node applies,
// and returns what waits for it: the command waits only at its end.
func inBackground(save func()) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		save()
	}()
	return func() { <-done }
}

// plainFile reads path if it is a file large enough for the cache to
// help, whose jobs list config.CutJobs cuts. data is what it read, if it
// read a file (nil for a directory, or one it could not read).
func plainFile(path string) (data []byte, items config.Items, ok bool) {
	data, err := readFile(path)
	if err != nil {
		return nil, items, false
	}
	// Only a whole read reports a file past the limit, which a parse of
	// some items would not see.
	if n := int64(len(data)); n < applycache.MinFile || n > config.MaxFileSize {
		return data, items, false
	}
	items, ok = config.CutJobs(data)
	return data, items, ok
}

// cacheEntry is what the cache keeps of a job: its name and digest, and
// for a job whose check reads more than its text (its CA file, which may
// have changed since) that it is to be parsed and checked every time.
func cacheEntry(s *jobs.Spec, digest string) applycache.Entry {
	return applycache.Entry{Name: s.Name, Digest: digest, Recheck: s.HTTP != nil && s.HTTP.CAFile != ""}
}

// cachedSet reads the file through the cache: it parses the items the
// cache does not know or is to check again, with the list's first and
// last (whose text runs into the file around the list, and which check
// the cache), and takes the others' names and digests from it. ok is
// false where the file must be read whole: the cache knows too little of
// it, an item it does not know is not whole on its own, the parse found a
// problem (reported at its place only by the whole parse), a first or
// last item is not what the cache says, a job has after: (checked against
// the whole set), or a name is taken twice.
func cachedSet(path string, items config.Items, ids []applycache.ID, c *applycache.Cache) (*Set, bool) {
	n := items.Len()
	if c.Len() == 0 {
		return nil, false
	}
	// at[i] is item i's index in the cache, or -1. The cache's items each
	// have a name of their own, so two items of the file found at one
	// index are the one name twice.
	at := make([]int, n)
	used := make([]bool, c.Len())
	idx := []int{0}
	misses, next := 0, 0
	for i := range n {
		k := c.Find(ids[i], next)
		if at[i] = k; k >= 0 {
			if used[k] {
				return nil, false
			}
			used[k], next = true, k+1
		}
		if i > 0 && i < n-1 && (k < 0 || c.Recheck(k)) {
			idx = append(idx, i)
			if k < 0 {
				misses++
			}
		}
	}
	idx = append(idx, n-1)
	if 4*misses > n || 2*len(idx) > n {
		return nil, false
	}
	fresh, ok := parseItems(path, items, idx)
	if !ok {
		return nil, false
	}
	set := &Set{names: make([]string, n), fresh: fresh, parsed: make(map[string]int, len(idx)), path: path, items: items}
	for i, k := range at {
		if k >= 0 {
			set.names[i] = c.Name(k)
		}
	}
	// The parsed jobs' names are each their own (the parse checks that);
	// one the cache knows for an item not parsed is a name twice.
	freshDigests := jobs.SpecDigests(fresh)
	for k, d := range freshDigests {
		i, s := idx[k], &fresh[k]
		if len(s.After) > 0 {
			return nil, false
		}
		if at[i] >= 0 {
			if e := c.At(at[i]); e.Name != s.Name || e.Digest != d {
				return nil, false
			}
		} else {
			set.changed = append(set.changed, k)
		}
		set.names[i] = s.Name
		set.parsed[s.Name] = k
	}
	for i, k := range at {
		if p, ok := set.parsed[set.names[i]]; k >= 0 && ok && idx[p] != i {
			return nil, false
		}
	}
	// The jobs the cache knows that no item is now, but for those of a
	// name an item parsed has (a job edited in place): removed.
	for k, u := range used {
		if _, ok := set.parsed[c.Name(k)]; !u && !ok {
			set.removed = append(set.removed, c.Name(k))
		}
	}
	// Only an apply by digest asks for every job's.
	set.digests = sync.OnceValue(func() []string {
		digests := make([]string, n)
		for i, k := range at {
			if k >= 0 {
				digests[i] = c.Digest(k)
			}
		}
		for k, i := range idx {
			digests[i] = freshDigests[k]
		}
		return digests
	})
	set.cache, set.base = c, c.Base() // before a Save replaces the cache
	set.saved = func() {}
	if len(set.changed) > 0 || len(set.removed) > 0 {
		// The items parsed are saved as they now are, whether the cache
		// knew them or not (one to check each time).
		kept := slices.Clone(at)
		for _, i := range idx {
			kept[i] = -1
		}
		set.saved = inBackground(func() {
			c.Save(ids, kept, func(i int) applycache.Entry {
				k, ok := slices.BinarySearch(idx, i)
				if !ok {
					return applycache.Entry{} // not kept: never here, every item not kept was parsed
				}
				return cacheEntry(&fresh[k], freshDigests[k])
			})
		})
	}
	return set, true
}

// parseItems parses the items idx (ascending) of the file at path alone:
// their jobs, or false where the file is to be read whole.
func parseItems(path string, items config.Items, idx []int) ([]jobs.Spec, bool) {
	f, ok, err := items.ParseOnly(path, idx)
	if !ok || err != nil || check(path, f) != nil || f.Node.JobsDir != "" || len(f.Jobs) != len(idx) {
		return nil, false
	}
	return f.Jobs, true
}
