package rpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/fencedstore/errcode"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/faults"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/history"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// Client calls other nodes' Servers: the leader's for what this node asks
// of it (scheduler.Forwarder), workers' for assignments
// (scheduler.Dispatcher). Set its fields, then use it from any goroutine.
//
// Calls to the leader go to the one gossip names; when that one cannot be
// reached or says it does not lead, to the one the servers' Raft names,
// in the same call. Every call but Renew then retries, with backoff, until
// the leader answers or ctx ends. An answer is the leader's only when it
// is a structured error (errcode.RemoteError) or a reply; anything else is
// retried like a lost connection.
type Client struct {
	// Self is this node's id; Local takes assignments for it without HTTP.
	Self  string
	Local interface {
		Accept(worker.Assignment) error
	}
	// TLS is this node's cluster identity: every call is TLS, and the
	// answering node must prove it is a node of the cluster.
	TLS *clustertls.Identity
	// NameAt names the node gossip says serves HTTP at addr ("" if
	// unknown), so a call checks it reached the node it meant to.
	NameAt func(addr string) string
	// LeaderHTTP returns the leader's HTTP address (host:port), and
	// NodeHTTP any node's.
	LeaderHTTP func() (string, error)
	NodeHTTP   func(node string) (string, error)
	// Servers lists the HTTP addresses of alive servers: a node that does
	// not know the leader yet (a worker whose gossip has not heard) asks
	// them.
	Servers func() []string
	// Faults, in a test build, drops dispatch replies (faults.Faults).
	Faults *faults.Faults
	// Clock is this node's wall clock; nil: the system clock. Skew, if
	// set, is told of every answer that carries the answering node's
	// time (peerclock.go).
	Clock jobs.Clock
	Skew  SkewObserver

	once sync.Once
	http *http.Client
}

var (
	_ scheduler.Forwarder  = (*Client)(nil)
	_ scheduler.Dispatcher = (*Client)(nil)
)

// client returns the HTTP client of the cluster's links: TLS with this
// node's certificate, checking the peer's against the cluster's CA and,
// where gossip knows who listens at the address, its node name.
func (c *Client) client() *http.Client {
	c.once.Do(func() {
		dialer := &net.Dialer{Timeout: 5 * time.Second}
		tr := &http.Transport{
			DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if c.TLS == nil {
					return nil, errors.New("no cluster TLS identity: calls between nodes are never sent in the clear")
				}
				name := ""
				if c.NameAt != nil {
					name = c.NameAt(addr)
				}
				d := &tls.Dialer{NetDialer: dialer, Config: c.TLS.HTTP2ClientConfig(name)}
				return d.DialContext(ctx, network, addr)
			},
			TLSHandshakeTimeout: 5 * time.Second,
			// HTTP/2: every call to a peer shares one connection. A busy
			// second dispatches hundreds of attempts at once, and every
			// worker renews and reports to the leader; over HTTP/1.1 each
			// call in flight took a connection of its own and a TLS
			// handshake, which cost both ends more CPU than the call.
			ForceAttemptHTTP2: true,
			HTTP2:             clustertls.HTTP2Health(),
			// An older node speaks only HTTP/1.1: keep its connections.
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
		}
		c.http = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	})
	return c.http
}

// SetJobs implements scheduler.Forwarder. The request is encoded once,
// not on every try, and its specs by jobs.EncodeSpecs rather than by
// encoding/json's reflection: a set of 100,000 jobs is 32 MB of them.
func (c *Client) SetJobs(ctx context.Context, specs []jobs.Spec, source string, scope []string) (string, error) {
	body, err := encodeSetJobs(setJobsRequest{Jobs: specs, Source: source, Scope: scope})
	if err != nil {
		return "", err
	}
	var reply setJobsReply
	err = c.toLeader(ctx, pathSetJobs, body, &reply)
	return reply.Hash, err
}

// SetJobsChanges implements scheduler.Forwarder: the changes travel to
// the leader as they came, not as the 100,000 jobs they make.
func (c *Client) SetJobsChanges(ctx context.Context, ch scheduler.JobChanges, source string) (string, int, error) {
	var reply setJobsChangesReply
	err := c.toLeader(ctx, pathSetJobsChanges, setJobsChangesRequest{Base: ch.Base, Upsert: ch.Upsert, Remove: ch.Remove, Source: source}, &reply)
	switch {
	case noRoute(err) || err == nil && reply.NeedSet:
		return "", 0, scheduler.ErrChangesNeedSet
	case err == nil && reply.Stale:
		return "", 0, fmt.Errorf("job set changes against %s: the leader's set is another: %w", ch.Base, fsm.ErrJobsDiffBase)
	}
	return reply.Hash, reply.Jobs, err
}

// encoded is a request body encoded already, as json.Marshal encodes
// the request.
type encoded []byte

// encodeSetJobs encodes req as json.Marshal does, byte for byte.
func encodeSetJobs(req setJobsRequest) (encoded, error) {
	var b bytes.Buffer
	b.WriteString(`{"jobs":`)
	if err := jobs.EncodeSpecs(&b, req.Jobs); err != nil {
		return nil, err
	}
	b.Write(jobs.AppendJSONString([]byte(`,"source":`), req.Source))
	if len(req.Scope) > 0 {
		scope, err := json.Marshal(req.Scope)
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"scope":`)
		b.Write(scope)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// TriggerAt implements scheduler.Forwarder. A leader of a version
// without pathTriggerAt triggers at its own time: a retry after a lost
// answer may then start a second run, as it could before.
func (c *Client) TriggerAt(ctx context.Context, job string, force bool, at time.Time) (jobs.Run, error) {
	var run jobs.Run
	err := c.toLeader(ctx, pathTriggerAt, triggerRequest{Job: job, Force: force, At: at}, &run)
	if noRoute(err) {
		err = c.toLeader(ctx, pathTrigger, triggerRequest{Job: job, Force: force}, &run)
	}
	return run, err
}

// noRoute reports whether err is a node's answer that it does not serve
// the path: a node of an older version.
func noRoute(err error) bool {
	var re *errcode.RemoteError
	return errors.Is(err, wire.ErrNoRoute) || errors.As(err, &re) && re.Code == "no_route"
}

// Pause implements scheduler.Forwarder.
func (c *Client) Pause(ctx context.Context, job string, paused bool) error {
	return c.toLeader(ctx, pathPause, pauseRequest{Job: job, Paused: paused}, nil)
}

// Release implements scheduler.Forwarder.
func (c *Client) Release(ctx context.Context, attempt, reason, asker string) (scheduler.Released, error) {
	var rel scheduler.Released
	err := c.toLeader(ctx, pathRelease, releaseRequest{Attempt: attempt, Reason: reason, Asker: asker}, &rel)
	return rel, err
}

// Started implements scheduler.Forwarder.
func (c *Client) Started(ctx context.Context, attempt string, at time.Time) error {
	return c.toLeader(ctx, pathStarted, startedRequest{Attempt: attempt, At: at}, nil)
}

// Complete implements scheduler.Forwarder.
func (c *Client) Complete(ctx context.Context, comp replicated.Completion) error {
	err := c.toLeader(ctx, pathComplete, comp, nil)
	if (comp.StdoutTail != "" || comp.NeverStarted) && errors.Is(err, wire.ErrBadRequest) {
		// A leader of an older release (log version 3) does not know
		// stdout_tail, nor one of version 4 never_started: the
		// completion matters more than either.
		comp.StdoutTail, comp.NeverStarted = "", false
		err = c.toLeader(ctx, pathComplete, comp, nil)
	}
	return err
}

// CompleteMany reports several completions to the leader in one call
// (scheduler.Forwarder), once: the worker retries what failed. A leader
// of a version without it answers no_route; each completion is then
// reported on its own.
func (c *Client) CompleteMany(ctx context.Context, cs []replicated.Completion) ([]error, error) {
	if len(cs) > maxCompleteMany {
		return nil, fmt.Errorf("complete %d attempts at once: at most %d", len(cs), maxCompleteMany)
	}
	var reply completeManyReply
	err := c.callLeader(ctx, pathCompleteMany, completeManyRequest{Completions: cs}, &reply)
	switch {
	case noRoute(err):
		return worker.CompleteEach(ctx, c, cs), nil
	case err != nil:
		return nil, err
	case len(reply.Errors) != len(cs):
		return nil, fmt.Errorf("completed %d attempts, the leader answered for %d", len(cs), len(reply.Errors))
	}
	errs := make([]error, len(cs))
	for i, b := range reply.Errors {
		if b != nil {
			errs[i] = wire.ItemErr(*b)
		}
	}
	return errs, nil
}

// Note implements scheduler.Forwarder.
func (c *Client) Note(ctx context.Context, attempt, kind, node, detail string) error {
	return c.toLeader(ctx, pathNote, noteRequest{Attempt: attempt, Kind: kind, Node: node, Detail: detail}, nil)
}

// Audit implements scheduler.Forwarder.
func (c *Client) Audit(ctx context.Context, kind, node, detail string) error {
	return c.toLeader(ctx, pathAudit, auditRequest{Kind: kind, Node: node, Detail: detail}, nil)
}

// Renew asks the leader once (renewals have their own rhythm) to renew an
// attempt's lease.
func (c *Client) Renew(ctx context.Context, attempt, node string) (worker.RenewReply, error) {
	var reply worker.RenewReply
	err := c.callLeader(ctx, pathRenew, renewRequest{Attempt: attempt, Node: node}, &reply)
	return reply, err
}

// RenewMany asks the leader once to renew several attempts' leases
// (scheduler.Forwarder). A leader of a version without it answers
// no_route; the attempts are then renewed one call each.
func (c *Client) RenewMany(ctx context.Context, node string, rs []worker.Renewal) ([]worker.RenewReply, error) {
	if len(rs) > maxRenewMany {
		return nil, fmt.Errorf("renew %d attempts at once: at most %d", len(rs), maxRenewMany)
	}
	req := renewManyRequest{Node: node, Attempts: make([]string, len(rs))}
	for i, r := range rs {
		req.Attempts[i] = r.Attempt
		if r.Confirming {
			if req.Starts == nil {
				req.Starts = make([]bool, len(rs))
			}
			req.Starts[i] = r.Start
		}
		if r.PreStart && r.Confirming {
			if req.PreStart == nil {
				req.PreStart = make([]bool, len(rs))
			}
			req.PreStart[i] = true
		}
	}
	var reply renewManyReply
	err := c.callLeader(ctx, pathRenewMany, req, &reply)
	if req.PreStart != nil && errors.Is(err, wire.ErrBadRequest) {
		// A leader of an older release (log version 7) does not know
		// short leases: it gives every renewal the whole lease, which
		// the worker, counting only the short one, never overstays.
		req.PreStart = nil
		err = c.callLeader(ctx, pathRenewMany, req, &reply)
	}
	if req.Starts != nil && errors.Is(err, wire.ErrBadRequest) {
		// A leader of an older release (log version 4) does not know
		// starts: it confirms no start, and answers the renewals
		// without them. It never takes a lease that ran out for a start
		// that did not happen, nor does a newer leader that gets them
		// without Confirming (worker.Renewal).
		req.Starts = nil
		err = c.callLeader(ctx, pathRenewMany, req, &reply)
	}
	switch {
	case noRoute(err):
		return c.renewEach(ctx, node, rs)
	case err != nil:
		return nil, err
	case len(reply.Replies) != len(rs):
		return nil, fmt.Errorf("renewed %d attempts, the leader answered for %d", len(rs), len(reply.Replies))
	}
	return reply.Replies, nil
}

// renewEach renews attempts one call each: a batch to a leader of a
// version without renew_many. Such a leader confirms no start: its
// answers have no Started.
func (c *Client) renewEach(ctx context.Context, node string, rs []worker.Renewal) ([]worker.RenewReply, error) {
	out := make([]worker.RenewReply, len(rs))
	for i, r := range rs {
		reply, err := c.Renew(ctx, r.Attempt, node)
		if err != nil {
			return nil, err
		}
		out[i] = reply
	}
	return out, nil
}

// Dispatch delivers an assignment to its worker: directly when it is this
// node, over the network otherwise. It tries once; the leader decides
// what a failure means.
func (c *Client) Dispatch(ctx context.Context, workerID string, a worker.Assignment) error {
	return c.toWorker(workerID, func() error { return c.Local.Accept(a) }, func(addr string) error {
		return c.post(ctx, addr, pathDispatch, a, nil)
	})
}

// DispatchMany delivers several assignments to one worker in one call
// (scheduler.Dispatcher), directly when it is this node. It tries
// once; on an error the leader dispatches each on its own.
func (c *Client) DispatchMany(ctx context.Context, workerID string, as []worker.Assignment) error {
	if len(as) > maxDispatchMany {
		return fmt.Errorf("dispatch %d assignments at once: at most %d", len(as), maxDispatchMany)
	}
	local := func() error {
		for _, a := range as {
			if err := c.Local.Accept(a); err != nil {
				return err
			}
		}
		return nil
	}
	return c.toWorker(workerID, local, func(addr string) error {
		var reply dispatchManyReply
		if err := c.post(ctx, addr, pathDispatchMany, as, &reply); err != nil {
			return err
		}
		if len(reply.Accepted) != len(as) {
			return fmt.Errorf("dispatch to %s: %d of %d assignments accepted", workerID, len(reply.Accepted), len(as))
		}
		return nil
	})
}

// toWorker delivers to worker with local when it is this node, else with
// remote at its HTTP address; a delivery that succeeded then passes the
// fault hook that may drop its reply.
func (c *Client) toWorker(workerID string, local func() error, remote func(addr string) error) error {
	var err error
	if workerID == c.Self && c.Local != nil {
		err = local()
	} else {
		var addr string
		if addr, err = c.NodeHTTP(workerID); err == nil {
			err = remote(addr)
		}
	}
	if err != nil {
		return err
	}
	return faults.DropDispatchReply(c.Faults)
}

// HistoryRange reads one page of the run history the server at addr
// archived in a range of log indexes (history.Store.Fetch). It tries
// once; a server whose history does not cover the range answers an
// error wrapping history.ErrNotCovered.
func (c *Client) HistoryRange(ctx context.Context, addr string, req history.RangeRequest) (history.RangePage, error) {
	var page history.RangePage
	err := c.post(ctx, addr, pathHistoryRange, req, &page)
	return page, err
}

// toLeader calls the leader with retries until it answers or ctx ends.
func (c *Client) toLeader(ctx context.Context, path string, in, out any) error {
	backoff := 50 * time.Millisecond
	// last is why the calls failed. A call its deadline (ctx's, or its
	// share of it) cut short says less than an answer before it: on a
	// busy machine the last call before ctx ends may get milliseconds.
	// Both are reported.
	var last error
	for {
		err := c.callLeader(ctx, path, in, out)
		if err == nil || final(err) {
			return err
		}
		if last == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			last = err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			if last != err {
				return fmt.Errorf("%w (last: %w; after it: %v)", ctx.Err(), last, err)
			}
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// final reports whether err is the leader's answer, which a retry would
// only repeat: a structured refusal, not "not the leader", "unavailable"
// or "not a node of this cluster" (which a secret being rolled can cure).
// A failure of the transport, an answer that is not a fencecron node's
// (errcode.UnexpectedAnswer), is never final.
func final(err error) bool {
	var re *errcode.RemoteError
	return errors.As(err, &re) && re.Status < http.StatusInternalServerError && re.Status != http.StatusUnauthorized
}

// callLeader calls the leader this node's gossip names, once. When that
// address cannot be reached or says it does not lead, it asks the
// servers, whose Raft knows, and calls once the leader they name: gossip
// can take seconds to carry news of an election, and a lease cannot wait
// that long. With a deadline, the first try gets half of the time left,
// so a leader that is paused or cut off cannot use it all up.
func (c *Client) callLeader(ctx context.Context, path string, in, out any) error {
	addr, err := c.LeaderHTTP()
	if err == nil {
		first := ctx
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			first, cancel = context.WithTimeout(ctx, time.Until(dl)/2)
			defer cancel()
		}
		if err = c.post(first, addr, path, in, out); !notTheLeader(err) {
			return err
		}
	}
	alt, aerr := c.askServers(ctx, addr)
	if aerr != nil {
		return err
	}
	if err2 := c.post(ctx, alt, path, in, out); err2 != nil {
		return fmt.Errorf("%w (and before, from gossip's leader: %v)", err2, err)
	}
	return nil
}

// notTheLeader reports whether err means the address asked is not (or no
// longer) the leader's: unreachable, not answering as a fencecron node,
// or answering that it does not lead or cannot now.
func notTheLeader(err error) bool {
	var re *errcode.RemoteError
	switch {
	case err == nil:
		return false
	case errors.As(err, &re):
		return re.Status == http.StatusServiceUnavailable
	}
	return true
}

// askServers returns the leader's HTTP address as the first alive server
// that knows one tells it, unless that is tried, the address that just
// failed.
func (c *Client) askServers(ctx context.Context, tried string) (string, error) {
	if c.Servers == nil {
		return "", election.ErrNoLeader
	}
	for _, s := range c.Servers() {
		if s == tried {
			continue
		}
		if addr := c.askServer(ctx, s); addr != "" && addr != tried {
			return addr, nil
		}
	}
	return "", election.ErrNoLeader
}

// askServer reads server's public status, which names the leader its
// Raft knows.
func (c *Client) askServer(ctx context.Context, server string) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+server+"/api/v1/status", nil)
	resp, err := c.client().Do(req)
	if err != nil {
		return ""
	}
	defer drainClose(resp)
	var st wire.Status
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st) != nil {
		return ""
	}
	return st.LeaderHTTP()
}

// drainClose reads an answer to its end, whether it was decoded or not, and
// closes it: a connection whose answer was left unread is closed, and the
// next call would pay a new TLS handshake.
func drainClose(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// post sends in to the Server at addr and decodes its reply into out. An
// error answer becomes what wire.Decode makes of it.
func (c *Client) post(ctx context.Context, addr, path string, in, out any) error {
	body, ok := in.(encoded)
	if !ok {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("%s: encode request: %w", path, err)
		}
	}
	url := "https://" + addr + Prefix + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	sent := c.clock().Now()
	resp, err := c.client().Do(req)
	if err != nil {
		return err
	}
	defer drainClose(resp)
	c.observeTime(addr, sent, resp)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("%s%s: %w", addr, Prefix+path, wire.Decode(resp.StatusCode, resp.Header.Get("Content-Type"), b))
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s%s: decode answer: %w", addr, Prefix+path, err)
	}
	return nil
}
