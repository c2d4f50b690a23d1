package election

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A pipeline whose responses nobody takes any more (raft's decoder
// stopped, as when a leader loses its term) blocks the next append for
// good; closePipelines, which shutdown calls, ends it, forgets the
// pipeline, and opens no more.
func TestPipelineTransport_CloseEndsABlockedAppend(t *testing.T) {
	target, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	stop, answered := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(answered)
		for {
			select {
			case rpc := <-target.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-answered }()
	tcp, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	src := newPipelineTransport(tcp)
	defer src.Close()
	p, err := src.AppendEntriesPipeline("target", target.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: 1}
	// The first append is answered, and its answer waits for a taker
	// that never comes (p.Consumer() is not read).
	if _, err := p.AppendEntries(req, &raft.AppendEntriesResponse{}); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		_, err := p.AppendEntries(req, &raft.AppendEntriesResponse{})
		second <- err
	}()
	// raft's behaviour this works around: the second append waits (a
	// bounded look, not a synchronisation: it never returns on its own).
	select {
	case err := <-second:
		t.Fatalf("the second append returned (%v) while the first's answer was not taken: hashicorp/raft no longer blocks here; pipelineTransport may be dropped", err)
	case <-time.After(300 * time.Millisecond):
	}
	src.closePipelines()
	select {
	case err := <-second:
		if !errors.Is(err, raft.ErrPipelineShutdown) {
			t.Errorf("the blocked append ended with %v; want %v", err, raft.ErrPipelineShutdown)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("closePipelines did not end the blocked append")
	}
	src.mu.Lock()
	kept := len(src.open)
	src.mu.Unlock()
	if kept != 0 {
		t.Errorf("%d pipelines still kept after closePipelines", kept)
	}
	// Raft still stopping replicates without one.
	if _, err := src.AppendEntriesPipeline("target", target.LocalAddr()); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Errorf("a pipeline opened after closePipelines: %v; want %v", err, raft.ErrPipelineReplicationNotSupported)
	}
}
