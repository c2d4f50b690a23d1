//go:build fencecron_faults

package rpc

import (
	"sync/atomic"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/faults"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// In a test build, drop-dispatch-replies loses the reply of a dispatch
// the worker took, as a lost network reply would.
func TestClient_DispatchDropsReplies(t *testing.T) {
	ff, err := faults.ParseFaults("drop-dispatch-replies=1")
	if err != nil {
		t.Fatal(err)
	}
	var took atomic.Int32
	w2 := node(t, &fakeLeader{}, func(worker.Assignment) error { took.Add(1); return nil })
	c := &Client{TLS: clientID, Faults: ff, NodeHTTP: func(string) (string, error) { return w2, nil }}
	a := worker.Assignment{Attempt: jobs.Attempt{ID: "report@1.1"}}
	if err := c.Dispatch(t.Context(), "w2", a); err == nil || took.Load() != 1 {
		t.Fatalf("first dispatch: %v, taken %d times; want taken, reply dropped", err, took.Load())
	}
	if err := c.Dispatch(t.Context(), "w2", a); err != nil || took.Load() != 2 {
		t.Fatalf("second dispatch: %v, taken %d times; want delivered", err, took.Load())
	}
}
