package rpc

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/fencedstore/errcode"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/history"
)

type rangeFunc func(history.RangeRequest) (history.RangePage, error)

func (f rangeFunc) Range(req history.RangeRequest) (history.RangePage, error) { return f(req) }

// A server's history answers other servers' backfills over the cluster's
// TLS; a stranger gets nothing, and "not covered" comes back as itself.
func TestClient_HistoryRange(t *testing.T) {
	srv := &Server{History: rangeFunc(func(req history.RangeRequest) (history.RangePage, error) {
		if req.Range.From >= 100 {
			return history.RangePage{}, fmt.Errorf("%w: asked %s", history.ErrNotCovered, req.Range)
		}
		return history.RangePage{
			Runs:    []history.RangeRun{{Index: 7, Run: jobs.Run{ID: "a@1", Job: "a", State: jobs.Succeeded}}},
			Covered: []history.Range{req.Range},
		}, nil
	})}
	addr := stub(t, srv)
	c := &Client{Self: "n1", TLS: clientID}
	page, err := c.HistoryRange(t.Context(), addr, history.RangeRequest{Range: history.Range{From: 0, To: 50}})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].Run.ID != "a@1" || len(page.Covered) != 1 {
		t.Fatalf("page %+v, %v", page, err)
	}
	_, err = c.HistoryRange(t.Context(), addr, history.RangeRequest{Range: history.Range{From: 100, To: 150}})
	if !errors.Is(err, history.ErrNotCovered) {
		t.Fatalf("an uncovered range: %v, want ErrNotCovered", err)
	}
	if code, body := serve(t, srv, "POST", "/internal/v1/history/range", `{"range":{"from":0,"to":5}}`, nil); code != 401 || !strings.Contains(body, `"code":"unauthorized"`) {
		t.Errorf("a stranger's backfill = %d %s, want 401", code, body)
	}
	worker := &Server{}
	if code, body := serve(t, worker, "POST", "/internal/v1/history/range", `{"range":{"from":0,"to":5}}`, peerTLS()); code != 409 || !strings.Contains(body, `"code":"not_covered"`) {
		t.Errorf("a node without history = %d %s, want 409 not_covered", code, body)
	}
	var re *errcode.RemoteError
	if !errors.As(err, &re) || re.Status != 409 {
		t.Errorf("not covered travels as %v", err)
	}
}
