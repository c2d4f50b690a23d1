// Package applycache remembers, for `fencecron apply`, what each job of a
// large jobs file was: its name and its digest (jobs.SpecDigests), by the
// text of its item in the file. A file of 100,000 jobs takes the command
// a second or more to parse and check, most of an apply that changes one
// job; with what the last apply of the file learnt, the command parses
// only the items whose text it has not seen (config.Items.ParseOnly) and
// sends the others by name and digest, as it would have anyway.
//
// What an item's text means depends on its text and on the file around
// the list (a store's size limits, a group's limits, the list's place),
// and on the variables the file around the list names: ${NAME} is
// expanded there (notify.host decides whether a job may send email). So
// a cache is of one file's frame and of those variables' values, made by
// one build of fencecron: any other finds it empty. It is a help, never an
// authority: it is read only if it is whole (its own SHA-256 checks), the
// command still parses the list's first and last items and checks them
// against it, and any doubt (an item it does not know that is not whole
// on its own, a problem in the file, a job with after:) makes the command
// parse the file whole, as if there were no cache. Nothing here ever
// fails an apply: a cache that cannot be read or written is an empty one.
//
// The files live in the user's cache directory (os.UserCacheDir; on
// Linux $XDG_CACHE_HOME or ~/.cache), one per jobs file applied, at most
// maxFiles of them; deleting the directory loses nothing but time.
package applycache

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/fencecron/fencecron/cmd/internal/atomicfile"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/buildinfo"
)

// MinFile is the size from which a file's apply uses the cache: a smaller
// one parses in a few milliseconds. (A variable, so that a test can use
// the cache with a smaller file.)
var MinFile int64 = 1 << 20

// maxFiles bounds the cache files kept: the ones written last.
const maxFiles = 16

// magic starts a cache file; a change of its format changes it.
const magic = "fencecron apply cache 3\n"

// maxRead bounds the cache file read: a set of jobs.MaxJobs jobs with
// names of a few hundred bytes.
const maxRead = 64 << 20

// ID names an item's text: the first 16 bytes of its SHA-256.
type ID [16]byte

// IDOf is the ID of an item's text.
func IDOf(item []byte) ID {
	sum := sha256.Sum256(item)
	return ID(sum[:16])
}

// Entry is what an item was: its job's name (normalized) and digest.
// Recheck marks a job whose check reads more than its text (its CA file,
// which may have changed since): it is parsed and checked every time,
// and the entry only says whether it changed.
type Entry struct {
	Name, Digest string
	Recheck      bool
}

// Cache is what the last apply of one jobs file, with this frame, learnt:
// each item's ID and its entry, as records of the file read. They are
// read where they lie: for a file of 100,000 jobs, an array of entries,
// 100,000 digests written out and a map by ID are some 10 MB a fresh
// command pays for in page faults, while its apply of a one-job change
// looks at a few entries and copies the others' records into the next
// cache.
type Cache struct {
	path  string            // the cache file; "" if there is no cache directory
	key   [32]byte          // this binary and the file's frame
	body  []byte            // the file read, but its checksum; nothing writes it
	recs  []int32           // each record's offset in body, then the records' end
	index map[uint64]int32  // by the ID's first 8 bytes: the first index of each, plus one
	scans int               // Finds answered by a scan, before index is built
	sum   [sha256.Size]byte // the file's, as read or as Save wrote it; zero if there is none
	base  string            // what the file's base names, if it is of this file
}

// A record is an item's ID, its entry's digest (jobs.DigestLen hex
// digits, as bytes), a byte of flags (1: Recheck), and its name: its
// length (2 bytes) then its bytes. A file is magic, the key, the records,
// their count (4 bytes), and the SHA-256 of all that.
const (
	recHead  = len(ID{}) + jobs.DigestLen/2 + 1 + 2
	recFixed = len(magic) + 32
)

// Loading is the cache of a jobs file being read (Load), before the
// command knows the file's frame: the two reads overlap.
type Loading struct {
	done  chan struct{}
	c     Cache    // as read, its key the one it was written for
	found [32]byte // that key
}

// Load starts reading the cache of the jobs file at file (any path
// naming it), in the background; Open takes it once the frame is known.
func Load(file string) *Loading {
	l := &Loading{done: make(chan struct{})}
	dir, err := cacheDir()
	abs, aerr := filepath.Abs(file)
	if err != nil || aerr != nil {
		close(l.done)
		return l
	}
	name := sha256.Sum256([]byte(abs))
	l.c.path = filepath.Join(dir, hex.EncodeToString(name[:12])+".cache")
	go func() {
		defer close(l.done)
		c := &l.c
		if data, _, err := atomicfile.ReadHuge(c.path, maxRead+1); err == nil && len(data) <= maxRead {
			var err error
			if l.found, c.recs, err = decode(data); err == nil {
				c.body = data[:len(data)-sha256.Size]
				c.sum = [sha256.Size]byte(data[len(data)-sha256.Size:])
				c.base = readBase(basePath(c.path), c.sum)
			}
		}
	}()
	return l
}

// Open waits for the cache read and returns it if it is of the frame
// head and tail, with the environment's variables as lookup gives them,
// and of this binary; else an empty one, which Save replaces.
func (l *Loading) Open(head, tail []byte, lookup func(string) (string, bool)) *Cache {
	key := frameKey(head, tail, lookup)
	<-l.done
	if l.found != key || l.c.sum == [sha256.Size]byte{} {
		return &Cache{path: l.c.path, key: key}
	}
	c := l.c
	c.key = key
	return &c
}

// prefix is an ID's first 8 bytes.
func prefix(id ID) uint64 { return binary.LittleEndian.Uint64(id[:8]) }

// Len is the number of items the cache knows.
func (c *Cache) Len() int { return max(len(c.recs)-1, 0) }

// maxScans is how many Finds a cache answers by reading every ID before
// it builds its index by ID: for 100,000 IDs, a scan costs some 0.15 ms
// and the index 5 ms, and as much again in page faults in a fresh
// command (-bench Cache_Find100k).
const maxScans = 16

// Find returns the index of the item of ID id, or -1 if the cache does
// not know it. hint is where the caller expects it: the index after the
// one it found last. A file edited in place has all its items at the
// hint, or just after it where an item was removed; one with a few items
// added or moved costs a scan for each (two for a move), and only more
// than maxScans build the index. Each item the cache knows has a name of
// its own, and an ID of its own: Save writes them so, and where a crafted
// cache holds an ID twice, the command sends a name twice at worst, a
// set the node refuses.
func (c *Cache) Find(id ID, hint int) int {
	for k := max(hint, 0); k < min(hint+2, c.Len()); k++ {
		if c.id(k) == id {
			return k
		}
	}
	if c.index == nil && c.scans < maxScans {
		c.scans++
		for k := range c.Len() {
			if c.id(k) == id {
				return k
			}
		}
		return -1
	}
	if c.index == nil {
		// Two IDs of one prefix (a chance of 1 in 2^64 per pair) leave
		// the later one unfound: its item is parsed, as one the cache
		// lacks.
		c.index = make(map[uint64]int32, c.Len())
		for k := range c.Len() {
			if p := prefix(c.id(k)); c.index[p] == 0 {
				c.index[p] = int32(k) + 1
			}
		}
	}
	// index holds each prefix's first index plus one: zero is none.
	if k := int(c.index[prefix(id)]) - 1; k >= 0 && c.id(k) == id {
		return k
	}
	return -1
}

// id is the ID of the item of index k.
func (c *Cache) id(k int) ID { return ID(c.body[c.recs[k]:]) }

// Name is the name of the job of item k; Recheck whether it is parsed
// and checked every time (Entry).
func (c *Cache) Name(k int) string {
	at := int(c.recs[k]) + recHead
	return unsafe.String(&c.body[at], int(c.recs[k+1])-at)
}
func (c *Cache) Recheck(k int) bool { return c.body[int(c.recs[k])+recHead-3]&1 != 0 }

// Digest is the digest of the job of item k.
func (c *Cache) Digest(k int) string {
	at := int(c.recs[k]) + len(ID{})
	return hex.EncodeToString(c.body[at : at+jobs.DigestLen/2])
}

// At is the entry of the item of index k.
func (c *Cache) At(k int) Entry { return Entry{c.Name(k), c.Digest(k), c.Recheck(k)} }

// Save replaces the cache with what the file now holds: item i, of ID
// ids[i], is the cache's item of index kept[i] (from Find, for that ID)
// if kept is not nil and that is not negative, and the job fresh(i) says
// if not; an entry without a name is not kept. The entries must be a
// valid set's, each name its own: Find's callers rely on it. The
// entries read stay as they were while Save writes (Name, Digest, At and
// Find may be called meanwhile); Base and SetBase wait for it. It
// reports why it wrote nothing, for tests; apply goes on either way.
func (c *Cache) Save(ids []ID, kept []int, fresh func(i int) Entry) error {
	if c.path == "" {
		return errors.New("no cache directory")
	}
	// The file is replaced: no base is of it until SetBase says so.
	c.sum, c.base = [sha256.Size]byte{}, ""
	if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
		return err
	}
	var sum [sha256.Size]byte
	err := atomicfile.WriteFunc(c.path, 0o600, func(w io.Writer) error {
		h := sha256.New()
		bw := bufio.NewWriterSize(io.MultiWriter(w, h), 256<<10)
		bw.WriteString(magic)
		bw.Write(c.key[:])
		n := 0
		var rec []byte
		for i := range ids {
			if kept != nil && kept[i] >= 0 {
				// The record read, ID and all: Find found it by ids[i].
				bw.Write(c.body[c.recs[kept[i]]:c.recs[kept[i]+1]])
				n++
				continue
			}
			if rec = appendRecord(rec[:0], ids[i], fresh(i)); rec != nil {
				bw.Write(rec)
				n++
			}
		}
		bw.Write(binary.LittleEndian.AppendUint32(nil, uint32(n)))
		if err := bw.Flush(); err != nil {
			return err
		}
		h.Sum(sum[:0])
		_, err := w.Write(sum[:])
		return err
	})
	if err != nil {
		return err
	}
	c.sum = sum
	prune(filepath.Dir(c.path), c.path)
	return nil
}

// appendRecord appends the record of item id, job e, to b; nil if e is
// not kept: it has no name, or one too long for its length field, or a
// digest not as jobs.SpecDigests writes them.
func appendRecord(b []byte, id ID, e Entry) []byte {
	var d [jobs.DigestLen / 2]byte
	if e.Name == "" || len(e.Name) > 0xffff || len(e.Digest) != jobs.DigestLen {
		return nil
	}
	if _, err := hex.Decode(d[:], []byte(e.Digest)); err != nil {
		return nil
	}
	flags := byte(0)
	if e.Recheck {
		flags = 1
	}
	b = append(append(append(b, id[:]...), d[:]...), flags)
	return append(binary.LittleEndian.AppendUint16(b, uint16(len(e.Name))), e.Name...)
}

// Base is the hash of the job set the last apply of the file made, as
// SetBase recorded it, if the cache still holds the jobs of that set:
// the command may send what changed since, against that set (PUT
// /api/v1/jobset/changes). "" if no such set is known.
func (c *Cache) Base() string { return c.base }

// SetBase records that the node's job set, of hash hash, is the set of
// the jobs the cache holds (as Open read it, or as Save last wrote it):
// an apply of the file made it, replacing the whole set. It is kept
// beside the cache file, bound to that file's checksum, so that a cache
// written since (another apply of the file) has no base until its own
// apply records one. It reports why it wrote nothing, for tests.
func (c *Cache) SetBase(hash string) error {
	switch {
	case c.path == "":
		return errors.New("no cache directory")
	case c.sum == [sha256.Size]byte{}:
		return errors.New("no cache file of this set")
	case !jobs.ValidDigest(hash):
		return fmt.Errorf("job set hash %q is not written as jobs.HashSpecs writes one", hash)
	}
	b := append(append([]byte(baseMagic), c.sum[:]...), hash...)
	if err := atomicfile.Write(basePath(c.path), b, 0o600); err != nil {
		return err
	}
	c.base = hash
	return nil
}

// baseMagic starts a base file; a change of its format changes it.
const baseMagic = "fencecron apply base 1\n"

// basePath is where the base of the cache file at path is kept.
func basePath(path string) string { return strings.TrimSuffix(path, ".cache") + ".base" }

// readBase reads the base file at path: the hash it records, if it was
// recorded for the cache file of checksum sum.
func readBase(path string, sum [sha256.Size]byte) string {
	b, _, err := atomicfile.Read(path, 256)
	if err != nil {
		return ""
	}
	rest, ok := bytes.CutPrefix(b, []byte(baseMagic))
	if !ok || len(rest) < sha256.Size || !bytes.Equal(rest[:sha256.Size], sum[:]) || !jobs.ValidDigest(string(rest[sha256.Size:])) {
		return ""
	}
	return string(rest[sha256.Size:])
}

// decode reads a cache file: the key it was written for, and the
// offset of each record (Cache.recs).
func decode(data []byte) (key [32]byte, recs []int32, err error) {
	if len(data) < recFixed+4+sha256.Size {
		return key, nil, errors.New("short")
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return key, nil, errors.New("checksum")
	}
	if string(body[:len(magic)]) != magic {
		return key, nil, errors.New("another format")
	}
	key = [32]byte(body[len(magic):recFixed])
	end := len(body) - 4
	// A record holds its head and a name of one byte or more: no count
	// beyond what that leaves room for is believed. (Offsets are int32:
	// the caller reads at most maxRead.)
	count := binary.LittleEndian.Uint32(body[end:])
	if uint64(count) > uint64((end-recFixed)/(recHead+1)) || len(data) > maxRead {
		return key, nil, errors.New("count")
	}
	n := int(count)
	recs = make([]int32, 0, n+1)
	at := recFixed
	for range n {
		if end-at < recHead {
			return key, nil, errors.New("truncated")
		}
		l := int(binary.LittleEndian.Uint16(body[at+recHead-2:]))
		if l == 0 || end-at-recHead < l {
			return key, nil, errors.New("truncated")
		}
		recs = append(recs, int32(at))
		at += recHead + l
	}
	if at != end {
		return key, nil, errors.New("trailing bytes")
	}
	return key, append(recs, int32(at)), nil
}

// frameKey is what a cache is valid for: this binary, the file around
// the list, and the value of each variable the file around the list
// names (in any section; naming one more than is expanded costs only a
// cache that is not found).
func frameKey(head, tail []byte, lookup func(string) (string, bool)) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s%s\x00%d\x00", magic, binaryID(), len(head))
	h.Write(head)
	h.Write(tail)
	var names []string
	for _, part := range [][]byte{head, tail} {
		for _, m := range envName.FindAllSubmatch(part, -1) {
			names = append(names, string(m[1]))
		}
	}
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		v, ok := lookup(name)
		fmt.Fprintf(h, "\x00%s\x00%t\x00%d\x00%s", name, ok, len(v), v)
	}
	return [32]byte(h.Sum(nil))
}

// envName finds the variable of a ${NAME} or ${NAME:-default}.
var envName = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`)

// binaryID names this build: what it parses and checks is what it was
// built with. Its commit alone is not enough (a build of a changed
// tree), so the executable's path, size and time are part of it: a
// rebuild starts an empty cache.
var binaryID = sync.OnceValue(func() string {
	id := buildinfo.Get().Commit
	if exe, err := os.Executable(); err == nil {
		if fi, err := os.Stat(exe); err == nil {
			id += fmt.Sprintf(" %s %d %d", exe, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return id
})

// cacheDir is where cache files are kept.
func cacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "fencecron", "apply"), nil
}

// prune removes all but the maxFiles cache files of dir written last:
// the one just written and those written last before it (file times are
// coarse, so it is never judged by its own).
func prune(dir, just string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type file struct {
		path string
		mod  int64
	}
	var files []file
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		// What a write cut short (a killed apply) left, if no write
		// could still be making it.
		if (strings.Contains(e.Name(), ".cache.tmp-") || strings.Contains(e.Name(), ".base.tmp-")) && time.Since(fi.ModTime()) > time.Hour {
			os.Remove(p)
			continue
		}
		if p != just && filepath.Ext(p) == ".cache" {
			files = append(files, file{p, fi.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(files, func(a, b file) int { return cmp.Compare(b.mod, a.mod) })
	for _, f := range files[min(maxFiles-1, len(files)):] {
		os.Remove(f.path)
		os.Remove(basePath(f.path))
	}
}
