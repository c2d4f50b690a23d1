package history

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencecron/fencecron/jobs"
)

// Bounds of a listing: the most runs, and events, one page holds.
const (
	MaxRunLimit   = 10_000
	MaxEventLimit = 5000
	// scanBudget bounds the stored records one page reads: a filter that
	// matches little ends the page early, with a cursor to go on from.
	scanBudget = 50_000
)

// RunQuery selects runs. Zero fields select everything; Limit 0 is 100.
type RunQuery struct {
	Job string
	// Namespace, if set, selects the runs of that namespace's jobs.
	Namespace string
	// Allow, if set, says which namespaces' runs the asker may read
	// (access control).
	Allow  func(ns string) bool
	States []jobs.State
	// Since and Until bound the scheduled time (Until exclusive).
	Since, Until time.Time
	Limit        int
	Cursor       string
}

// RunPage is a page of runs, newest scheduled first, and the cursor of
// the next page ("" when there is none).
type RunPage struct {
	Runs []jobs.Run
	Next string
}

func (q RunQuery) match(r jobs.Run) bool {
	switch {
	case q.Job != "" && r.Job != q.Job:
		return false
	case q.Namespace != "" && jobNamespace(r.Job) != q.Namespace:
		return false
	case q.Allow != nil && !q.Allow(jobNamespace(r.Job)):
		return false
	case len(q.States) > 0 && !slices.Contains(q.States, r.State):
		return false
	case !q.Since.IsZero() && r.ScheduledAt.Before(q.Since):
		return false
	case !q.Until.IsZero() && !r.ScheduledAt.Before(q.Until):
		return false
	}
	return true
}

// ListRuns lists runs, newest scheduled first, from hot (the replicated
// state's runs) merged with this history: each run once, whichever holds
// it, and only the runs retention keeps (a finished run beyond its job's
// newest history.runs, or older than its max_age, is not listed even
// while the replicated state still holds it).
func (s *Store) ListRuns(hot []jobs.Run, q RunQuery) (RunPage, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	q.Limit = min(q.Limit, MaxRunLimit)
	var cur *runCursor
	if q.Cursor != "" {
		c, err := decodeRunCursor(q.Cursor)
		if err != nil {
			return RunPage{}, err
		}
		cur = &c
	}
	hot = s.hotRuns(hot)
	now := s.now()
	rs := &runScan{q: q, cur: cur}
	err := s.view(func(tx *bbolt.Tx) error {
		rs.vis = &visibility{s: s, tx: tx, hot: hot, now: now, cutoffs: map[string]*time.Time{}}
		rs.seen = map[string]bool{}
		for _, r := range hot {
			if (cur == nil || cur.before(r)) && q.match(r) && rs.vis.visible(r) {
				rs.page = append(rs.page, r)
				rs.seen[r.ID] = true
			}
		}
		if tx == nil {
			return nil
		}
		return rs.file(tx)
	})
	if err != nil {
		return RunPage{}, err
	}
	return runPage(rs.page, rs.stoppedAt, q.Limit), nil
}

// hotRuns adds to hot what was trimmed but not yet committed (it is hot
// too, or it would be listed nowhere), newest first, each run once.
func (s *Store) hotRuns(hot []jobs.Run) []jobs.Run {
	s.mu.Lock()
	for _, it := range s.pending {
		if it.run != nil {
			hot = append(hot, *it.run)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(hot, newer)
	return slices.CompactFunc(hot, func(a, b jobs.Run) bool { return a.ID == b.ID })
}

// runScan is one listing's read of the stored runs: newest first, after
// the cursor, up to Limit+1 matches, at most scanBudget records read, so
// that a filter matching little cannot make one page read the whole file.
type runScan struct {
	q    RunQuery
	cur  *runCursor
	vis  *visibility
	seen map[string]bool // the hot runs listed
	page []jobs.Run
	// stoppedAt is the last run read when the read stopped before the
	// file's end, nil when it did not.
	stoppedAt        *runCursor
	fromFile, budget int
}

// file reads the job's own runs when the query names one (they are
// together in bucketRuns), else every run by time.
func (rs *runScan) file(tx *bbolt.Tx) error {
	rs.budget = scanBudget
	runs := tx.Bucket(bucketRuns)
	upper := rs.q.Until
	if rs.cur != nil && (upper.IsZero() || rs.cur.at.Before(upper)) {
		upper = rs.cur.at.Add(1) // the cursor's own time: before() sorts it out
	}
	if rs.q.Job != "" {
		return rs.byJob(runs, upper)
	}
	return rs.byTime(tx.Bucket(bucketByTime), runs, upper)
}

// byJob reads the job's runs backwards from upper (exclusive).
func (rs *runScan) byJob(runs *bbolt.Bucket, upper time.Time) error {
	prefix := jobPrefix(rs.q.Job)
	c := runs.Cursor()
	var k, val []byte
	if upper.IsZero() {
		k, val = c.Seek(append([]byte(rs.q.Job), 1)) // the next job's first key
	} else {
		k, val = c.Seek(runKey(rs.q.Job, upper))
	}
	if k == nil {
		k, val = c.Last()
	} else {
		k, val = c.Prev()
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, val = c.Prev() {
		if _, at, _ := splitRunKey(k); !rs.q.Since.IsZero() && at.Before(rs.q.Since) {
			rs.stoppedAt = nil
			return nil
		}
		if rs.budget--; rs.budget < 0 {
			return nil
		}
		more, err := rs.scan(k, val)
		if err != nil || !more {
			return err
		}
	}
	rs.stoppedAt = nil
	return nil
}

// byTime reads every job's runs backwards from upper (exclusive), through
// the time index.
func (rs *runScan) byTime(byTime, runs *bbolt.Bucket, upper time.Time) error {
	c := byTime.Cursor()
	var k []byte
	if upper.IsZero() {
		k, _ = c.Last()
	} else if k, _ = c.Seek(timeBytes(upper)); k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	for ; k != nil; k, _ = c.Prev() {
		job, at, ok := splitTimeKey(k)
		if !ok {
			return fmt.Errorf("bad time key %q", k)
		}
		if !rs.q.Since.IsZero() && at.Before(rs.q.Since) {
			rs.stoppedAt = nil
			return nil
		}
		if rs.budget--; rs.budget < 0 {
			return nil
		}
		rk := runKey(job, at)
		val := runs.Get(rk)
		if val == nil {
			continue
		}
		more, err := rs.scan(rk, val)
		if err != nil || !more {
			return err
		}
	}
	rs.stoppedAt = nil
	return nil
}

// scan takes one stored run onto the page if it is new to it, matches and
// is visible, and says whether to read on; k is its key.
func (rs *runScan) scan(k, v []byte) (bool, error) {
	rec, err := decodeRun(k, v)
	if err != nil {
		return false, err
	}
	r := rec.Run
	rs.stoppedAt = &runCursor{at: r.ScheduledAt, job: r.Job}
	if rs.seen[r.ID] || (rs.cur != nil && !rs.cur.before(r)) || !rs.q.match(r) || !rs.vis.visible(r) {
		return true, nil
	}
	rs.page = append(rs.page, r)
	rs.fromFile++
	return rs.fromFile <= rs.q.Limit, nil
}

// runPage cuts page to limit and sets the next page's cursor.
func runPage(page []jobs.Run, stoppedAt *runCursor, limit int) RunPage {
	if stoppedAt != nil {
		// The file was not read to its end: nothing older than where it
		// stopped may be listed on this page (the next one starts there).
		page = slices.DeleteFunc(page, func(r jobs.Run) bool { return stoppedAt.before(r) && !stoppedAt.sameAs(r) })
	}
	slices.SortFunc(page, newer)
	out := RunPage{Runs: page}
	switch {
	case len(page) > limit:
		out.Runs = page[:limit]
		last := out.Runs[len(out.Runs)-1]
		out.Next = runCursor{at: last.ScheduledAt, job: last.Job}.encode()
	case stoppedAt != nil:
		if len(page) > 0 {
			last := page[len(page)-1]
			out.Next = runCursor{at: last.ScheduledAt, job: last.Job}.encode()
		} else {
			out.Next = stoppedAt.encode()
		}
	}
	if out.Runs == nil {
		out.Runs = []jobs.Run{}
	}
	return out
}

// view runs f in a read transaction, or with a nil one on a store never
// opened (a worker's, which keeps no history: it lists the hot window).
func (s *Store) view(f func(tx *bbolt.Tx) error) error {
	if s.db == nil {
		return f(nil)
	}
	return s.db.View(f)
}

func (s *Store) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}

func (c runCursor) sameAs(r jobs.Run) bool { return c.job == r.Job && c.at.Equal(r.ScheduledAt) }

// visibility decides which finished runs retention keeps, for one
// listing: per job, the scheduled time of its history.runs-th newest
// finished run among hot and stored ones (nil: fewer than that).
type visibility struct {
	s       *Store
	tx      *bbolt.Tx
	hot     []jobs.Run // newest first
	now     time.Time
	cutoffs map[string]*time.Time
}

func (v *visibility) visible(r jobs.Run) bool {
	if !r.State.Terminal() || v.s.db == nil {
		return true // a store never opened keeps nothing, and trims nothing
	}
	h := v.s.retention(r.Job)
	if Expired(r.ScheduledAt, h, v.now) {
		return false
	}
	cut, ok := v.cutoffs[r.Job]
	if !ok {
		cut = v.cutoff(r.Job, h)
		v.cutoffs[r.Job] = cut
	}
	return cut == nil || !r.ScheduledAt.Before(*cut)
}

// cutoff merges the job's finished hot runs and its stored runs, newest
// first, to its h.Runs-th.
func (v *visibility) cutoff(job string, h jobs.History) *time.Time {
	var hotTimes []time.Time
	for _, r := range v.hot {
		if r.Job == job && r.State.Terminal() {
			hotTimes = append(hotTimes, r.ScheduledAt)
		}
	}
	prefix := jobPrefix(job)
	var k []byte
	var c *bbolt.Cursor
	if v.tx != nil {
		c = v.tx.Bucket(bucketRuns).Cursor()
		if k, _ = c.Seek(append([]byte(job), 1)); k == nil { // the next job's first key
			k, _ = c.Last()
		} else {
			k, _ = c.Prev()
		}
	}
	n, i := 0, 0
	var last time.Time
	for n < h.Runs {
		var fileAt time.Time
		fileOK := k != nil && bytes.HasPrefix(k, prefix)
		if fileOK {
			_, fileAt, _ = splitRunKey(k)
		}
		switch {
		case i < len(hotTimes) && (!fileOK || !hotTimes[i].Before(fileAt)):
			last = hotTimes[i]
			if fileOK && hotTimes[i].Equal(fileAt) {
				k, _ = c.Prev() // the same run in both
			}
			i++
		case fileOK:
			last = fileAt
			k, _ = c.Prev()
		default:
			return nil
		}
		n++
	}
	return &last
}

// EventQuery selects events. Zero fields select everything; Limit 0 is
// 500.
type EventQuery struct {
	Job, Kind string
	// Allow, if set, says which namespaces' jobs' events the asker may
	// read (access control); an event of no job is every reader's.
	Allow func(ns string) bool
	// Since and Until bound the event's time (Until exclusive).
	Since, Until time.Time
	// After lists only events after this sequence number.
	After  uint64
	Limit  int
	Cursor string
}

// EventPage is a page of events: the newest Limit that match, listed
// oldest first as the trail reads, and the cursor of the page of older
// ones ("" when there are none).
type EventPage struct {
	Events []jobs.Event
	Next   string
}

func (q EventQuery) match(e jobs.Event) bool {
	switch {
	case e.Seq <= q.After:
		return false
	case q.Job != "" && e.Job != q.Job:
		return false
	case q.Kind != "" && e.Kind != q.Kind:
		return false
	case q.Allow != nil && !EventReadable(e, q.Allow):
		return false
	case !q.Since.IsZero() && e.Time.Before(q.Since):
		return false
	case !q.Until.IsZero() && !e.Time.Before(q.Until):
		return false
	}
	return true
}

// ListEvents lists events from hot (the replicated trail) merged with
// this history, each once.
func (s *Store) ListEvents(hot []jobs.Event, q EventQuery) (EventPage, error) {
	if q.Limit <= 0 {
		q.Limit = 500
	}
	q.Limit = min(q.Limit, MaxEventLimit)
	var before uint64 // exclusive; 0: none
	if q.Cursor != "" {
		n, err := decodeEventCursor(q.Cursor)
		if err != nil {
			return EventPage{}, err
		}
		before = n
	}
	s.mu.Lock()
	for _, it := range s.pending {
		if it.event != nil {
			hot = append(hot, *it.event)
		}
	}
	s.mu.Unlock()
	// Newest first.
	slices.SortFunc(hot, func(a, b jobs.Event) int { return cmpU(b.Seq, a.Seq) })
	hot = slices.CompactFunc(hot, func(a, b jobs.Event) bool { return a.Seq == b.Seq })
	now := s.now()
	var page []jobs.Event
	seen := map[uint64]bool{}
	for _, e := range hot {
		if (before == 0 || e.Seq < before) && q.match(e) && (s.db == nil || !Expired(e.Time, s.Default.Resolve(jobs.DefaultHistory), now)) {
			page = append(page, e)
			seen[e.Seq] = true
		}
	}
	var stoppedAt uint64
	err := s.view(func(tx *bbolt.Tx) error {
		if tx == nil {
			return nil
		}
		c := tx.Bucket(bucketEvents).Cursor()
		var k, v []byte
		if before == 0 {
			k, v = c.Last()
		} else if k, v = c.Seek(u64(before)); k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		fromFile, budget := 0, scanBudget
		for ; k != nil; k, v = c.Prev() {
			seq := beUint64(k)
			if seq <= q.After {
				return nil
			}
			if budget--; budget < 0 {
				stoppedAt = seq + 1
				return nil
			}
			rec, err := decodeEvent(v)
			if err != nil {
				return err
			}
			e := rec.Event
			if !q.Since.IsZero() && e.Time.Before(q.Since) {
				return nil
			}
			if seen[e.Seq] || !q.match(e) || Expired(e.Time, s.Default.Resolve(jobs.DefaultHistory), now) {
				continue
			}
			page = append(page, e)
			if fromFile++; fromFile > q.Limit {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return EventPage{}, err
	}
	if stoppedAt != 0 {
		page = slices.DeleteFunc(page, func(e jobs.Event) bool { return e.Seq < stoppedAt })
	}
	slices.SortFunc(page, func(a, b jobs.Event) int { return cmpU(b.Seq, a.Seq) })
	out := EventPage{Events: page}
	switch {
	case len(page) > q.Limit:
		out.Events = page[:q.Limit]
		out.Next = encodeEventCursor(out.Events[len(out.Events)-1].Seq)
	case stoppedAt != 0:
		out.Next = encodeEventCursor(stoppedAt)
		if len(page) > 0 {
			out.Next = encodeEventCursor(page[len(page)-1].Seq)
		}
	}
	slices.Reverse(out.Events)
	if out.Events == nil {
		out.Events = []jobs.Event{}
	}
	return out, nil
}

// jobNamespace returns the namespace of a job by its qualified name.
func jobNamespace(job string) string {
	ns, _ := jobs.SplitQualified(job)
	return ns
}

// EventReadable says whether an event is for a reader who may read the
// namespaces allow accepts: one of a job of such a namespace, or one of
// no job but a change of access control (jobs.EventACL), which only a
// reader of every namespace sees.
func EventReadable(e jobs.Event, allow func(ns string) bool) bool {
	if e.Job == "" {
		return e.Kind != jobs.EventACL
	}
	return allow(jobNamespace(e.Job))
}
