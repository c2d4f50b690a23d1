package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencecron/fencecron/jobs"
)

// RangeRequest asks a peer for what its history archived in a range of
// log indexes, one page at a time: After is the Next of the page before
// ("" for the first).
type RangeRequest struct {
	Range Range  `json:"range"`
	After []byte `json:"after,omitempty"`
}

// RangePage is one page of a range: runs and events with the index that
// archived them, Covered, the parts of the range the answering history
// holds whole (the same on every page), and Next, empty on the last page.
type RangePage struct {
	Runs    []RangeRun   `json:"runs"`
	Events  []RangeEvent `json:"events"`
	Covered []Range      `json:"covered"`
	Next    []byte       `json:"next,omitempty"`
}

// RangeRun is a run and the index of the entry that archived it.
type RangeRun struct {
	Index uint64   `json:"index"`
	Run   jobs.Run `json:"run"`
}

// RangeEvent is an event and the index of the entry that archived it.
type RangeEvent struct {
	Index uint64     `json:"index"`
	Event jobs.Event `json:"event"`
}

// Range answers a peer's gap filling: one page of what this history
// archived in req.Range, with the parts of it this history holds whole
// (Covered: not in a gap of its own, and archived already); ErrNotCovered
// if it holds no part whole. What retention has deleted here is missing
// from the answer, as it would be deleted there.
func (s *Store) Range(req RangeRequest) (RangePage, error) {
	s.wmu.Lock()
	through, gaps := s.through, s.gaps
	s.wmu.Unlock()
	if req.Range.To <= req.Range.From {
		return RangePage{}, fmt.Errorf("%w: range %s is empty", ErrNotCovered, req.Range)
	}
	covered := Covered(through, gaps, req.Range)
	if len(covered) == 0 {
		return RangePage{}, fmt.Errorf("%w: asked %s, this history holds up to %d with gaps %v", ErrNotCovered, req.Range, through, gaps)
	}
	page := RangePage{Runs: []RangeRun{}, Events: []RangeEvent{}, Covered: covered}
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketArchived).Cursor()
		start := u64(req.Range.From + 1)
		if len(req.After) > 0 && bytes.Compare(req.After, start) >= 0 {
			start = append(bytes.Clone(req.After), 0) // just after it
		}
		end := u64(req.Range.To + 1)
		n := 0
		var last []byte
		for k, _ := c.Seek(start); k != nil && bytes.Compare(k, end) < 0; k, _ = c.Next() {
			if n == pageRecords {
				page.Next = last // the last record sent
				return nil
			}
			last = bytes.Clone(k)
			if len(k) < 9 {
				return fmt.Errorf("bad archived key %q", k)
			}
			index, kind, primary := beUint64(k[:8]), k[8], k[9:]
			switch kind {
			case kindRun:
				if v := tx.Bucket(bucketRuns).Get(primary); v != nil {
					rec, err := decodeRun(primary, v)
					if err != nil {
						return err
					}
					page.Runs = append(page.Runs, RangeRun{Index: index, Run: rec.Run})
				}
			case kindEvent:
				if v := tx.Bucket(bucketEvents).Get(primary); v != nil {
					rec, err := decodeEvent(v)
					if err != nil {
						return err
					}
					page.Events = append(page.Events, RangeEvent{Index: index, Event: rec.Event})
				}
			}
			n++
		}
		return nil
	})
	return page, err
}

func beUint64(b []byte) uint64 {
	var n uint64
	for _, c := range b {
		n = n<<8 | uint64(c)
	}
	return n
}

// maxFillWait bounds the wait between rounds of a gap filling no peer
// can finish (every server of a cluster upgraded from a version without
// history has a gap before its upgrade that nobody will ever cover).
const maxFillWait = 10 * time.Minute

// fillGapsLoop closes gaps: every FillEvery, while there are any, it
// asks the peers in turn for the first one; after a round that left it
// open it waits twice as long, up to maxFillWait.
func (s *Store) fillGapsLoop(ctx context.Context) {
	defer s.wg.Done()
	if s.Peers == nil || s.Fetch == nil {
		return
	}
	wait := s.FillEvery
	for {
		t := s.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		_, gaps := s.Coverage()
		if len(gaps) == 0 {
			wait = s.FillEvery
			continue
		}
		if err := s.FillGap(ctx, gaps[0]); err != nil && ctx.Err() == nil {
			wait = min(2*wait, maxFillWait)
			s.Logger.Warn("history: gap not filled yet; will try again", "gap", gaps[0].String(), "in", wait, "err", err)
			continue
		}
		wait = s.FillEvery
	}
}

// FillGap fills gap g from the peers in turn: from each, what it holds
// of what is still missing of g, stored as anything archived here is
// (retention applied), and the parts it covered recorded closed. It
// returns nil once g is closed whole.
func (s *Store) FillGap(ctx context.Context, g Range) error {
	var errs []error
	for _, peer := range s.Peers() {
		_, gaps := s.Coverage()
		var left []Range
		for _, r := range gaps {
			if r.overlaps(g) {
				left = append(left, Range{From: max(r.From, g.From), To: min(r.To, g.To)})
			}
		}
		if len(left) == 0 {
			break
		}
		for _, r := range left {
			covered, err := s.fillFrom(ctx, peer, r)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", peer, err))
				continue
			}
			s.Logger.Info("history: gap filled", "gap", r.String(), "covered", fmt.Sprint(covered), "peer", peer)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	_, gaps := s.Coverage()
	for _, r := range gaps {
		if r.overlaps(g) {
			errs = append(errs, fmt.Errorf("%s still open", r))
			return errors.Join(errs...)
		}
	}
	return nil
}

// maxFillPages bounds one gap filling from one peer: a gap of more
// records than this many pages is finished on the next round.
const maxFillPages = 10_000

// fillFrom copies what peer archived in g, and closes the parts of
// g it covered, which it returns.
func (s *Store) fillFrom(ctx context.Context, peer string, g Range) ([]Range, error) {
	req := RangeRequest{Range: g}
	for range maxFillPages {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		page, err := s.Fetch(cctx, peer, req)
		cancel()
		if err != nil {
			return nil, err
		}
		if err := s.store(page); err != nil {
			return nil, err
		}
		if len(page.Next) == 0 {
			return page.Covered, s.closeGaps(g, page.Covered)
		}
		req.After = page.Next
	}
	return nil, fmt.Errorf("more than %d pages", maxFillPages)
}

// store writes a gap-filled page, as Flush writes archived records.
func (s *Store) store(page RangePage) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	now := s.Clock.Now()
	return s.update(func(w *writes) error {
		for _, r := range page.Runs {
			if err := s.insertRun(w, runRecord(r), now); err != nil {
				return err
			}
		}
		for _, e := range page.Events {
			if err := s.insertEvent(w, eventRecord(e), now); err != nil {
				return err
			}
		}
		return nil
	})
}

// closeGaps records the parts of g in covered as no longer missing.
func (s *Store) closeGaps(g Range, covered []Range) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	gaps := s.gaps
	for _, c := range covered {
		if c.overlaps(g) {
			gaps = RemoveGap(gaps, Range{From: max(c.From, g.From), To: min(c.To, g.To)})
		}
	}
	if err := s.db.Update(func(tx *bbolt.Tx) error { return putCoverage(tx, s.through, gaps) }); err != nil {
		return err
	}
	s.gaps = gaps
	return nil
}
