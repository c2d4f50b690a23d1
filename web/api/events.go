package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencecron/fencecron/scheduler/history"
)

// Server-sent events on GET /api/v1/events (Accept: text/event-stream):
//
//	event: audit     one per audit-trail entry, id = its seq, data = the
//	                 jobs.Event as JSON; resume with Last-Event-ID or ?after=
//	event: cluster   data = {node, raft_state, leader, epoch, members}
//	                 whenever that summary changes (gossip and Raft views
//	                 are not audit entries)
//	: ping           a comment every EventHeartbeat, so idle proxies
//	                 and dead clients are noticed
//
// Each stream has its own coalescing subscription to the replicated
// state, so a slow client delays nobody; one that cannot take a write
// within sseWriteTimeout is dropped. At most MaxEventStreams are
// open at once; one more is answered 503 with Retry-After (a dashboard's
// script tries again then).
const (
	sseWriteTimeout = 10 * time.Second
	sseRetryAfter   = 30 * time.Second
	sseClusterPoll  = time.Second
	sseBatch        = 500
)

// wantsStream reports whether the client asked for server-sent events.
func wantsStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// clusterSummary is the data of a "cluster" event.
type clusterSummary struct {
	Node      string   `json:"node"`
	RaftState string   `json:"raft_state"`
	Leader    string   `json:"leader"`
	Epoch     uint64   `json:"epoch"`
	Members   []string `json:"members"` // "name=state"
}

func (s *Server) clusterSummary() clusterSummary {
	epoch, _ := s.State.Epoch()
	id, _ := s.Cluster.Leader()
	c := clusterSummary{Node: s.Cluster.ID(), RaftState: s.Cluster.State(), Leader: id, Epoch: epoch, Members: []string{}}
	for _, m := range s.Cluster.Members() {
		c.Members = append(c.Members, m.Name+"="+m.State)
	}
	return c
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	if !wantsStream(r) {
		s.handleEventsJSON(w, r)
		return
	}
	after, err := resumeAfter(r)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if !s.takeStream(w, r) {
		return
	}
	defer s.streams.Add(-1)
	// The server's ReadTimeout does not end a stream: once a request
	// without a body is read, net/http clears the read deadline. Its
	// write deadline (limitWrites) is replaced before every write below.
	rc := http.NewResponseController(w)
	changed, unsubscribe := s.State.Subscribe()
	defer unsubscribe()
	s.Metrics.EventStreams.Add(1)
	defer s.Metrics.EventStreams.Add(-1)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	es := &eventStream{s: s, w: w, rc: rc, after: after, allow: readable(r)}
	defer rc.SetWriteDeadline(time.Time{})
	es.run(r, changed)
}

// resumeAfter is the sequence number a reconnecting client last saw:
// the browser's Last-Event-ID wins over a script's ?after=.
func resumeAfter(r *http.Request) (uint64, error) {
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, BadRequest("Last-Event-ID must be an event sequence number, got %q", v)
		}
		return n, nil
	}
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, BadRequest("after must be an event sequence number, got %q", v)
		}
		return n, nil
	}
	return 0, nil
}

// takeStream takes one of a bounded number of places for a stream, so
// that many clients cannot each hold a goroutine, a subscription and a
// connection for as long as they like. When it reports false it has
// answered the request; when true the caller gives the place back.
func (s *Server) takeStream(w http.ResponseWriter, r *http.Request) bool {
	if n := s.streams.Add(1); n > int64(s.MaxEventStreams) {
		s.streams.Add(-1)
		s.Metrics.EventStreamsRefused.Add(1)
		s.Error(w, r, &retryError{after: sseRetryAfter,
			err: fmt.Errorf("%w: %d event streams are open, the most this node serves (api.limits.max_event_streams); try again later", errUnavailable, n-1)})
		return false
	}
	return true
}

// eventStream is one client's stream: where it is in the audit trail
// and the last cluster summary it was sent, so it is sent only changes.
type eventStream struct {
	s           *Server
	w           http.ResponseWriter
	rc          *http.ResponseController
	after       uint64
	lastCluster string
	// allow says which namespaces' jobs' events the client may read
	// (nil: all).
	allow func(ns string) bool
	// buf holds a batch of audit entries as they are sent, kept from one
	// batch to the next: a dashboard open at 1,000 runs a second is sent
	// 3,000 entries a second.
	buf bytes.Buffer
}

// maxKeptBuf is the largest batch buffer a stream keeps between batches.
const maxKeptBuf = 1 << 20

// run sends the backlog, then whatever changes, until the client goes
// or cannot keep up.
func (es *eventStream) run(r *http.Request, changed <-chan struct{}) {
	if !es.write("retry: 2000\n\n") || !es.sendCluster() || !es.sendAudit() {
		return
	}
	poll := time.NewTicker(sseClusterPoll)
	defer poll.Stop()
	keepAlive := time.NewTicker(es.s.EventHeartbeat)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-changed:
			if !es.sendAudit() || !es.sendCluster() {
				return
			}
		case <-poll.C:
			// A token revoked or expired, or a session ended, ends the
			// stream: the browser's reconnect then meets the refusal.
			if es.s.Guard.Recheck(r) != nil || !es.sendCluster() {
				return
			}
		case <-keepAlive.C:
			if !es.write(": ping\n\n") {
				return
			}
		}
	}
}

// write sends one chunk and flushes it, or reports the client gone.
func (es *eventStream) write(chunk string) bool {
	return es.send([]byte(chunk))
}

func (es *eventStream) send(chunk []byte) bool {
	es.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	if _, err := es.w.Write(chunk); err != nil {
		return false
	}
	return es.rc.Flush() == nil
}

func (es *eventStream) sendCluster() bool {
	b, _ := json.Marshal(es.s.clusterSummary())
	if string(b) == es.lastCluster {
		return true
	}
	es.lastCluster = string(b)
	return es.write("event: cluster\ndata: " + es.lastCluster + "\n\n")
}

// sendAudit writes every entry after the last one sent, in batches so
// that a long backlog is not held in memory at once.
func (es *eventStream) sendAudit() bool {
	for {
		evs := es.s.State.Events(es.after, sseBatch)
		if len(evs) == 0 {
			return true
		}
		b := &es.buf
		b.Reset()
		enc := json.NewEncoder(b)
		for _, e := range evs {
			es.after = e.Seq
			if es.allow != nil && !history.EventReadable(e, es.allow) {
				continue // another namespace's: never shown
			}
			b.WriteString("id: ")
			b.Write(strconv.AppendUint(b.AvailableBuffer(), e.Seq, 10))
			b.WriteString("\nevent: audit\ndata: ")
			if enc.Encode(e) != nil { // the JSON and a newline, or nothing
				b.WriteByte('\n') // as before: an empty data line, the frame still ended
			}
			b.WriteByte('\n')
		}
		ok := es.send(b.Bytes())
		if b.Cap() > maxKeptBuf {
			es.buf = bytes.Buffer{}
		}
		if !ok {
			return false
		}
		if len(evs) < sseBatch {
			return true
		}
	}
}
