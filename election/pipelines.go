package election

import (
	"maps"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
)

// pipelineTransport is raft's network transport with the replication
// pipelines it opens kept, so that shutdown can close them.
//
// hashicorp/raft v1.7.3's pipelined replication can block for good. With
// MaxRPCsInFlight at its default of 2, a pipeline's channels are
// unbuffered. Once the goroutine that takes its responses has stopped (a
// response of a newer term, or a refusal: a leader losing its term), the
// pipeline's reader waits to hand it the next response, and the next
// append waits for the reader. Only the pipeline's Close ends those
// waits, and the goroutine blocked in the append is the one that would
// call it. Raft's shutdown then waits for that goroutine forever: a
// leader that lost its term to a hung disk could not be closed, and a
// planned stop ran out of its budget (both seen in CI).
type pipelineTransport struct {
	*raft.NetworkTransport
	mu     sync.Mutex
	open   map[*keptPipeline]bool
	closed bool // closePipelines was called: no pipeline opens
}

func newPipelineTransport(t *raft.NetworkTransport) *pipelineTransport {
	return &pipelineTransport{NetworkTransport: t, open: map[*keptPipeline]bool{}}
}

// keptPipeline is a pipeline its transport keeps until it is closed.
type keptPipeline struct {
	raft.AppendPipeline
	t *pipelineTransport
}

// AppendEntriesPipeline implements raft.Transport.
func (t *pipelineTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		// Raft then replicates without a pipeline.
		p.Close()
		return nil, raft.ErrPipelineReplicationNotSupported
	}
	k := &keptPipeline{AppendPipeline: p, t: t}
	t.open[k] = true
	return k, nil
}

// Close closes the pipeline; a second Close does nothing.
func (p *keptPipeline) Close() error {
	p.t.mu.Lock()
	delete(p.t.open, p)
	p.t.mu.Unlock()
	return p.AppendPipeline.Close()
}

// closePipelines closes every pipeline still open, which ends an append
// blocked in one (raft.ErrPipelineShutdown), and opens no more: raft
// stopping may still try one.
func (t *pipelineTransport) closePipelines() {
	t.mu.Lock()
	t.closed = true
	open := slices.Collect(maps.Keys(t.open))
	t.mu.Unlock()
	for _, p := range open {
		p.Close()
	}
}
