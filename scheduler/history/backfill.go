package history

import (
	"bytes"
	"context"
	"encoding/json"
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
// archived them, and Next, empty on the last page.
type RangePage struct {
	Runs   []RangeRun   `json:"runs"`
	Events []RangeEvent `json:"events"`
	Next   []byte       `json:"next,omitempty"`
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

// Range answers a peer's backfill: one page of what this history
// archived in req.Range, or ErrNotCovered if it lacks any of that range
// (a gap of its own, or not archived that far yet). What retention has
// deleted here is missing from the answer, as it would be deleted there.
func (s *Store) Range(req RangeRequest) (RangePage, error) {
	s.wmu.Lock()
	through, gaps := s.through, s.gaps
	s.wmu.Unlock()
	if req.Range.To <= req.Range.From {
		return RangePage{}, fmt.Errorf("range %s: empty", req.Range)
	}
	if !Covers(through, gaps, req.Range) {
		return RangePage{}, fmt.Errorf("%w: asked %s, this history holds up to %d with gaps %v", ErrNotCovered, req.Range, through, gaps)
	}
	page := RangePage{Runs: []RangeRun{}, Events: []RangeEvent{}}
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
				var rec runRecord
				if v := tx.Bucket(bucketRuns).Get(primary); v != nil {
					if err := json.Unmarshal(v, &rec); err != nil {
						return err
					}
					page.Runs = append(page.Runs, RangeRun{Index: index, Run: rec.Run})
				}
			case kindEvent:
				var rec eventRecord
				if v := tx.Bucket(bucketEvents).Get(primary); v != nil {
					if err := json.Unmarshal(v, &rec); err != nil {
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

// backfillLoop closes gaps: every BackfillEvery, while there are any,
// it asks the peers in turn for the first gap until one covers it.
func (s *Store) backfillLoop(ctx context.Context) {
	defer s.wg.Done()
	if s.Peers == nil || s.Fetch == nil {
		return
	}
	for {
		t := s.Clock.NewTimer(s.BackfillEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		_, gaps := s.Coverage()
		if len(gaps) == 0 {
			continue
		}
		if err := s.Backfill(ctx, gaps[0]); err != nil && ctx.Err() == nil {
			s.Logger.Warn("history: backfill not done yet; will try again", "gap", gaps[0].String(), "err", err)
		}
	}
}

// Backfill fetches gap g from the first peer that covers it, stores what
// it sends (retention applied as to anything archived here), and records
// the gap closed.
func (s *Store) Backfill(ctx context.Context, g Range) error {
	var errs []error
	for _, peer := range s.Peers() {
		err := s.backfillFrom(ctx, peer, g)
		if err == nil {
			s.Logger.Info("history: gap backfilled", "gap", g.String(), "peer", peer)
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", peer, err))
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return errors.New("no peer to ask")
	}
	return errors.Join(errs...)
}

// maxBackfillPages bounds one backfill from one peer: a gap of more
// records than this many pages is finished on the next round.
const maxBackfillPages = 10_000

func (s *Store) backfillFrom(ctx context.Context, peer string, g Range) error {
	req := RangeRequest{Range: g}
	for range maxBackfillPages {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		page, err := s.Fetch(cctx, peer, req)
		cancel()
		if err != nil {
			return err
		}
		if err := s.store(page); err != nil {
			return err
		}
		if len(page.Next) == 0 {
			return s.closeGap(g)
		}
		req.After = page.Next
	}
	return fmt.Errorf("more than %d pages", maxBackfillPages)
}

// store writes a backfilled page, as Flush writes archived records.
func (s *Store) store(page RangePage) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	now := s.Clock.Now()
	return s.db.Update(func(tx *bbolt.Tx) error {
		for _, r := range page.Runs {
			if err := s.insertRun(tx, runRecord(r), now); err != nil {
				return err
			}
		}
		for _, e := range page.Events {
			if err := s.insertEvent(tx, eventRecord(e), now); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *Store) closeGap(g Range) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	gaps := RemoveGap(s.gaps, g)
	if err := s.db.Update(func(tx *bbolt.Tx) error { return putCoverage(tx, s.through, gaps) }); err != nil {
		return err
	}
	s.gaps = gaps
	return nil
}
