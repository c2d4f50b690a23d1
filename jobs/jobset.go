package jobs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Bounds on a job set, whichever way it arrives (a config file, a
// directory of job files, PUT /api/v1/jobset, a follower forwarding to
// the leader) and however it is kept (one Raft entry, the FSM, a
// snapshot). Each path checks the bound it can see and names it when it
// refuses; none holds more than a few copies of a set this size.
const (
	// MaxJobs is the most jobs a set may hold: twice the 100,000 the
	// scale benchmark (fencebench scale) measures.
	MaxJobs = 200_000
	// MaxSetBytes bounds a job set encoded as JSON: the body of PUT
	// /api/v1/jobset and, with its envelope, the Raft entry that
	// replicates it. 100,000 typical jobs take 30 to 40 MiB.
	MaxSetBytes = 96 << 20
	// MaxSpecBytes bounds one job's spec encoded as JSON (SpecBytes), far
	// below MaxSetBytes: a job's page and GET /api/v1/jobs/{name} serve
	// it to whoever may read, and a page of jobs serves a hundred or more.
	// It is twice the longest single argument Linux passes to a process
	// (MAX_ARG_STRLEN, 128 KiB), so any shell: script that can run at all
	// fits, with its JSON escaping.
	MaxSpecBytes = 256 << 10
)

// HashSpecs returns a stable hash of a job set: the same jobs, in any
// order, hash the same. Nodes compare it to find a config that drifted
// from the applied set.
//
// It hashes the bytes json.Marshal gives the sorted set, encoded a window
// of specs at a time on every core (EncodeSpecsRange): a set of 100,000 jobs
// is neither copied nor encoded whole in memory, and hashing it takes a
// fraction of the apply.
func HashSpecs(specs []Spec) string {
	h := sha256.New()
	if specs == nil {
		// json.Marshal of a nil set is "null", and so its hash.
		h.Write([]byte("null"))
		return hex.EncodeToString(h.Sum(nil)[:8])
	}
	order := NameOrder(len(specs), func(i int) *Spec { return &specs[i] })
	if err := EncodeSpecsRange(h, len(specs), func(k int) *Spec { return &specs[order[k]] }, 0, len(specs), specWindow, nil); err != nil {
		panic(fmt.Sprintf("hash job set: %v", err)) // Specs are plain data, and a hash takes every write
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// NameOrder returns the positions 0 to n-1 of the specs at gives, in the
// order of their names: the order a set is hashed in.
func NameOrder(n int, at func(i int) *Spec) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(at(a).Name, at(b).Name) })
	return order
}

// EncodeSpecs writes specs to w as json.Marshal writes them (a nil set
// as null), each window of specs encoded on every core: `fencecron
// apply` streams a set of 100,000 jobs to the node while it encodes it.
func EncodeSpecs(w io.Writer, specs []Spec) error {
	if specs == nil {
		_, err := io.WriteString(w, "null")
		return err
	}
	return EncodeSpecsRange(w, len(specs), func(k int) *Spec { return &specs[k] }, 0, len(specs), specWindow, nil)
}

// specWindow is how many specs EncodeSpecs encodes at a time.
const specWindow = 4096

// EncodeSpecsRange writes the JSON array of the n specs at gives, in
// order, or the part of it that holds specs from to to (the array is
// its parts, in order). A window of specs at a time is encoded on every
// core, each core's share into one buffer, and written while the next
// window is encoded: hashing a set of 100,000 (a SHA-256 of some 32 MB,
// one core's work) then overlaps its encoding, and the hash takes a few
// large writes rather than two for every spec. mark, if not nil, is
// called after each window is written with the position of its end in
// the whole array: the leader keeps its hash's state there, to hash a
// set changed after its first jobs from there.
func EncodeSpecsRange(w io.Writer, n int, at func(k int) *Spec, from, to, window int, mark func(end int)) error {
	if from == 0 {
		if _, err := io.WriteString(w, "["); err != nil {
			return err
		}
	}
	cores := max(1, runtime.GOMAXPROCS(0))
	// Two windows' buffers, in turn: one is written while the other is
	// filled. Each share starts at a typical spec's size per spec, and
	// keeps what it grew to for the windows after.
	type part struct {
		bufs [][]byte
		end  int
	}
	free, full := make(chan [][]byte, 2), make(chan part, 2)
	for range 2 {
		bufs := make([][]byte, cores)
		for p := range bufs {
			bufs[p] = make([]byte, 0, min(window, to-from)/cores*320)
		}
		free <- bufs
	}
	var failed atomic.Bool
	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		for p := range full {
			for _, b := range p.bufs {
				if werr != nil {
					break
				}
				if _, werr = w.Write(b); werr != nil {
					failed.Store(true)
				}
			}
			if werr == nil && mark != nil {
				mark(p.end)
			}
			free <- p.bufs[:cap(p.bufs)]
		}
	}()
	for lo := from; lo < to && !failed.Load(); lo += window {
		size := min(window, to-lo)
		bufs := <-free
		parts := InParallel(size, func(p, a, b int) {
			buf := bufs[p][:0]
			for k := a; k < b; k++ {
				if lo+k > 0 {
					buf = append(buf, ',')
				}
				buf = AppendSpec(buf, at(lo+k))
			}
			bufs[p] = buf
		})
		full <- part{bufs[:parts], lo + size}
	}
	close(full)
	<-written
	if werr != nil || to < n {
		return werr
	}
	_, err := io.WriteString(w, "]")
	return err
}

// CheckSet checks a job set as a whole before it is replicated: every
// spec valid against l (Spec.Validate) and names unique. It returns every
// problem, wrapping ErrInvalidConfig; a set of more than MaxJobs is
// refused for that alone.
//
// Each job that known marks (known[i] for specs[i]; nil marks none) is
// taken as valid on its own: a job of the replicated set, checked when
// that set was applied, sent again as it was. The checks of the set as a
// whole (unique names, after, groups) cover every job.
func CheckSet(specs []Spec, l Limits, known []bool) error {
	if len(specs) > MaxJobs {
		// Not worth checking each of them.
		return fmt.Errorf("%w: %d jobs: a job set holds at most %d", ErrInvalidConfig, len(specs), MaxJobs)
	}
	var problems []string
	invalid := ValidateEach(specs, l, known)
	seen := make(map[string]bool, len(specs))
	for i, s := range specs {
		name := s.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		} else if seen[name] {
			problems = append(problems, fmt.Sprintf("job %s: defined twice", name))
		}
		seen[name] = true
		if err := invalid[i]; err != nil {
			problems = append(problems, fmt.Sprintf("job %s: %v", name, err))
		}
	}
	for _, p := range CheckAfter(specs) {
		problems = append(problems, fmt.Sprintf("job %s: after: %s", p.Job, p.Msg))
	}
	problems = append(problems, checkGroups(specs)...)
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}

// ValidateEach returns Spec.Validate of each spec, with a spec larger
// than MaxSpecBytes refused as a problem of the job as a whole, in the
// set's order, each checked on its own on every core; a spec that known
// marks (CheckSet) is not checked, and has no error.
func ValidateEach(specs []Spec, l Limits, known []bool) []error {
	invalid := make([]error, len(specs))
	InParallel(len(specs), func(_, a, b int) {
		for i := a; i < b; i++ {
			if known == nil || !known[i] {
				invalid[i] = withSize(&specs[i], specs[i].Validate(l))
			}
		}
	})
	return invalid
}

// withSize returns err, Validate's answer for s, with the problem of a
// spec larger than MaxSpecBytes added. Field "" puts it at the job
// itself: the config parser reports it at the job's line and column.
func withSize(s *Spec, err error) error {
	if specBytesAtMost(s) <= MaxSpecBytes {
		return err // nearly every spec: encoding it would say no more
	}
	n := SpecBytes(s)
	if n <= MaxSpecBytes {
		return err
	}
	p := FieldError{Index: -1, Msg: fmt.Sprintf("the spec is %d KiB of JSON; one job's spec is at most %d KiB (jobs.MaxSpecBytes): keep a long script in a file the command runs",
		(n+1023)>>10, MaxSpecBytes>>10)}
	var se *SpecError
	switch {
	case errors.As(err, &se):
		return &SpecError{Job: se.Job, Problems: append(slices.Clone(se.Problems), p)}
	case err != nil:
		return errors.Join(err, &SpecError{Job: s.Name, Problems: []FieldError{p}})
	}
	return &SpecError{Job: s.Name, Problems: []FieldError{p}}
}

// specBytesAtMost returns a bound on SpecBytes(s) that encodes nothing:
// every byte of every string at 6 (no byte becomes more: a control byte
// or an invalid one is written as \u00XX or \ufffd, and U+2028's three
// as \u2028), and specFrame and the like for the field names,
// punctuation, numbers and durations. Checking 100,000 jobs encoded each
// one only to learn what this says for a few hundred nanoseconds.
// TestSpecBytesAtMost lists the fields, with their types, of the types
// it walks: a field added or changed there must be counted here.
func specBytesAtMost(s *Spec) int {
	const (
		specFrame   = 2048 // 27 field names, 6 durations, 3 numbers, nulls
		notifyFrame = 128
		httpFrame   = 256
		groupFrame  = 128
	)
	n := specFrame
	str := func(v string) { n += 6*len(v) + 3 } // quotes and a comma
	strs := func(vs []string) {
		for _, v := range vs {
			str(v)
		}
	}
	pairs := func(m map[string]string) {
		for k, v := range m {
			str(k)
			str(v)
		}
	}
	str(s.Name)
	str(s.Namespace)
	strs(s.Schedules)
	str(s.Timezone)
	strs(s.Command)
	str(s.Shell)
	pairs(s.Env)
	str(s.Dir)
	str(s.Output)
	str(s.Overlap)
	str(s.Misfire)
	pairs(s.Target)
	str(s.DST.Spring)
	str(s.DST.Fall)
	strs(s.After)
	str(s.Group)
	for _, nt := range s.Notify {
		n += notifyFrame
		strs(nt.On)
		str(nt.Webhook)
		str(nt.Slack)
		strs(nt.Email)
	}
	if h := s.HTTP; h != nil {
		n += httpFrame + 21*len(h.ExpectStatus)
		str(h.URL)
		str(h.Method)
		pairs(h.Headers)
		str(h.Body)
		str(h.CAFile)
	}
	if g := s.GroupLimits; g != nil {
		n += groupFrame
		str(g.Name)
		str(g.Namespace)
	}
	return n
}

// SpecBytes returns the size of s encoded as JSON, as json.Marshal
// encodes it: what MaxSpecBytes bounds.
func SpecBytes(s *Spec) int { return len(AppendSpec(nil, s)) }

// SpecSizes returns SpecBytes of each spec, encoded on every core: the
// leader cuts a job set difference of 100,000 jobs into entries by them.
func SpecSizes(specs []Spec) []int {
	sizes := make([]int, len(specs))
	InParallel(len(specs), func(_, a, b int) {
		var buf []byte
		for i := a; i < b; i++ {
			buf = AppendSpec(buf[:0], &specs[i])
			sizes[i] = len(buf)
		}
	})
	return sizes
}

// DigestLen is the length of a digest SpecDigests writes, and of a
// set's hash (HashSpecs).
const DigestLen = 16

// ValidDigest reports whether d is written as SpecDigests writes a
// digest and HashSpecs a set's hash: DigestLen lowercase hex digits.
func ValidDigest(d string) bool {
	if len(d) != DigestLen {
		return false
	}
	for _, c := range []byte(d) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// SpecDigests returns each spec's digest: the first 8 bytes of the
// SHA-256 of its JSON, once normalized, in hex. `fencecron apply` sends a
// node its jobs' names and digests first, and then only the specs of the
// jobs the node holds under no such name and digest; the node takes the
// others from its own set. 8 bytes suffice there: a digest is compared
// only with the one job of the same name, and whoever could forge a
// matching spec may apply that spec anyway. It encodes a part of the
// specs on each core.
func SpecDigests(specs []Spec) []string {
	return SpecDigestsAt(len(specs), func(i int) *Spec { return &specs[i] })
}

// SpecDigestsAt is SpecDigests of the n specs at gives.
func SpecDigestsAt(n int, at func(i int) *Spec) []string {
	out := make([]string, n)
	InParallel(n, func(_, a, b int) {
		var buf []byte
		for i := a; i < b; i++ {
			s := *at(i)
			s.Normalize()
			// The JSON and a newline, as a json.Encoder writes a value.
			buf = append(AppendSpec(buf[:0], &s), '\n')
			sum := sha256.Sum256(buf)
			out[i] = hex.EncodeToString(sum[:DigestLen/2])
		}
	})
	return out
}

// InParallel calls fn on contiguous parts [a, b) of [0, n), part p of
// parts, one part per core, and returns parts when all are done; a small
// n is done in one call.
func InParallel(n int, fn func(p, a, b int)) (parts int) {
	parts = min(runtime.GOMAXPROCS(0), n/512)
	if parts <= 1 {
		fn(0, 0, n)
		return 1
	}
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() { fn(p, p*n/parts, (p+1)*n/parts) })
	}
	wg.Wait()
	return parts
}

// CountSpecs returns how many specs the JSON b holds, as json.Marshal
// writes them (each has a name; a group_limits has one too, not counted:
// the set holds its jobs by address, and an array twice their count would
// keep as much again alive), bounded by MaxJobs (a longer list is refused
// whatever its capacity): the capacity to decode a job set into.
func CountSpecs(b []byte) int {
	return min(bytes.Count(b, []byte(`"name"`))-bytes.Count(b, []byte(`"group_limits":{"name"`)), MaxJobs)
}

// Addrs returns the address of each of specs. The replicated set holds
// its jobs by address, so that a set changed in a few jobs shares the
// others with the set before it rather than copying each (38 MB for
// 100,000 jobs, on every replica, for a one-job change).
func Addrs(specs []Spec) []*Spec {
	out := make([]*Spec, len(specs))
	for i := range specs {
		out[i] = &specs[i]
	}
	return out
}

// Values returns a copy of the specs at ps.
func Values(ps []*Spec) []Spec {
	out := make([]Spec, len(ps))
	for i, p := range ps {
		out[i] = *p
	}
	return out
}
