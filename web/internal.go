package web

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
	"strings"
	"sync"
	"time"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
)

// maxInternalBody bounds a request on the internal API.
const maxInternalBody = 8 << 20

// requirePeer admits only requests from other nodes of the cluster: over
// TLS, with a client certificate the cluster's CA issued (clustertls). A
// stranger, or a job's process, cannot call the internal API however it
// reaches the port.
func (s *Server) requirePeer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !clustertls.IsPeer(r.TLS) {
			s.error(w, r, fmt.Errorf("%w: the internal API takes only nodes of this cluster, over TLS with the cluster's certificate", errUnauthorized))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// leaderCall is one typed request of scheduler.Forwarder on
// /internal/v1/apply: Method names the call, the other fields are its
// arguments. The leader's scheduler.Scheduler.Local re-validates them.
// (A stand-in until the node-to-node transport has a package of its own.)
type leaderCall struct {
	Method     string                `json:"method"`
	Specs      []jobs.Spec           `json:"specs,omitempty"`
	Source     string                `json:"source,omitempty"`
	Job        string                `json:"job,omitempty"`
	Paused     bool                  `json:"paused,omitempty"`
	Attempt    string                `json:"attempt,omitempty"`
	At         time.Time             `json:"at,omitzero"`
	Completion *scheduler.Completion `json:"completion,omitempty"`
	Kind       string                `json:"kind,omitempty"`
	Node       string                `json:"node,omitempty"`
	Detail     string                `json:"detail,omitempty"`
}

// leaderReply is the answer to a leaderCall: Code names the sentinel of
// an error (errCodes), so the caller's errors.Is works across the wire.
type leaderReply struct {
	Hash    string `json:"hash,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// errCodes name the sentinel errors that cross the wire.
var errCodes = map[string]error{
	"duplicate_run": jobs.ErrDuplicateRun,
	"unknown_job":   jobs.ErrUnknownJob,
	"not_found":     jobs.ErrNotFound,
	"stale_attempt": jobs.ErrStaleAttempt,
	"not_leader":    jobs.ErrNotLeader,
	"run_finished":  jobs.ErrRunFinished,
	"invalid":       jobs.ErrInvalidConfig,
}

func replyOf(hash string, err error) leaderReply {
	rep := leaderReply{Hash: hash}
	if err != nil {
		rep.Code, rep.Message = "error", err.Error()
		for code, sentinel := range errCodes {
			if errors.Is(err, sentinel) {
				rep.Code = code
				break
			}
		}
	}
	return rep
}

func (rep leaderReply) err() error {
	if rep.Code == "" {
		return nil
	}
	if sentinel, ok := errCodes[rep.Code]; ok {
		return fmt.Errorf("%s (on the leader): %w", rep.Message, sentinel)
	}
	return fmt.Errorf("on the leader: %s", rep.Message)
}

func (s *Server) handleInternalApply(w http.ResponseWriter, r *http.Request) {
	var c leaderCall
	if err := decodeJSON(w, r, &c); err != nil {
		s.error(w, r, err)
		return
	}
	ctx, leader := r.Context(), s.Scheduler.Local()
	var hash string
	var err error
	switch c.Method {
	case "set_jobs":
		hash, err = leader.SetJobs(ctx, c.Specs, c.Source)
	case "pause":
		err = leader.Pause(ctx, c.Job, c.Paused)
	case "started":
		err = leader.Started(ctx, c.Attempt, c.At)
	case "complete":
		if c.Completion == nil {
			err = fmt.Errorf("complete without a completion: %w", jobs.ErrInvalidConfig)
			break
		}
		err = leader.Complete(ctx, *c.Completion)
	case "note":
		err = leader.Note(ctx, c.Attempt, c.Kind, c.Node, c.Detail)
	case "audit":
		err = leader.Audit(ctx, c.Kind, c.Node, c.Detail)
	default:
		err = fmt.Errorf("unknown call %q: %w", c.Method, jobs.ErrInvalidConfig)
	}
	writeJSON(w, http.StatusOK, replyOf(hash, err))
}

// triggerRequest is the body of /internal/v1/trigger.
type triggerRequest struct {
	Job   string `json:"job"`
	Force bool   `json:"force,omitempty"`
}

// renewRequest is the body of /internal/v1/renew.
type renewRequest struct {
	Attempt string `json:"attempt"`
	Node    string `json:"node"`
}

func (s *Server) handleInternalRenew(w http.ResponseWriter, r *http.Request) {
	var req renewRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	reply, err := s.Scheduler.Local().Renew(r.Context(), req.Attempt, req.Node)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, reply)
}

func (s *Server) handleInternalTrigger(w http.ResponseWriter, r *http.Request) {
	var req triggerRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	run, err := s.Scheduler.Local().Trigger(r.Context(), req.Job, req.Force)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

func (s *Server) handleInternalDispatch(w http.ResponseWriter, r *http.Request) {
	var a scheduler.Assignment
	if err := decodeJSON(w, r, &a); err != nil {
		s.error(w, r, err)
		return
	}
	if s.Worker == nil {
		s.error(w, r, badRequest("this node runs no jobs"))
		return
	}
	if err := s.Worker.Accept(a); err != nil {
		s.error(w, r, fmt.Errorf("%w: %v", errUnavailable, err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"accepted": a.Attempt.ID})
}

func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxInternalBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("decode %s body: %v", r.URL.Path, err)
	}
	return nil
}

// Peer is a client of other nodes' internal APIs. It carries commands,
// renewals and triggers to the leader (scheduler.Forwarder) and
// assignments to workers (scheduler.Dispatcher).
type Peer struct {
	// Self is this node's id; Local takes assignments for it without HTTP.
	Self  string
	Local interface {
		Accept(scheduler.Assignment) error
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
	Faults  *scheduler.Faults

	once sync.Once
	http *http.Client
}

var _ scheduler.Forwarder = (*Peer)(nil)
var _ scheduler.Dispatcher = (*Peer)(nil)

// client returns the HTTP client of the cluster's links: TLS with this
// node's certificate, checking the peer's against the cluster's CA and,
// where gossip knows who listens at the address, its node name.
func (p *Peer) client() *http.Client {
	p.once.Do(func() {
		dialer := &net.Dialer{Timeout: 5 * time.Second}
		tr := &http.Transport{
			DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if p.TLS == nil {
					return nil, errors.New("no cluster TLS identity: calls between nodes are never sent in the clear")
				}
				name := ""
				if p.NameAt != nil {
					name = p.NameAt(addr)
				}
				d := &tls.Dialer{NetDialer: dialer, Config: p.TLS.ClientConfig(clustertls.ProtoHTTP, name)}
				return d.DialContext(ctx, network, addr)
			},
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     90 * time.Second,
		}
		p.http = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	})
	return p.http
}

// call posts a typed call to the leader, retrying while there is none,
// it cannot be reached, or it says it no longer leads, until ctx ends.
func (p *Peer) call(ctx context.Context, c leaderCall) (string, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	var rep leaderReply
	err = p.toLeader(ctx, "/internal/v1/apply", body, &rep, func() bool {
		if rep.Code != "not_leader" {
			return false
		}
		// The leader's answer may leave Code out: decode it into a clean value.
		rep = leaderReply{}
		return true
	})
	if err != nil {
		return "", fmt.Errorf("%s on the leader: %w", c.Method, err)
	}
	return rep.Hash, rep.err()
}

// SetJobs asks the leader to check and replicate a job set.
func (p *Peer) SetJobs(ctx context.Context, specs []jobs.Spec, source string) (string, error) {
	return p.call(ctx, leaderCall{Method: "set_jobs", Specs: specs, Source: source})
}

// Pause asks the leader to pause or resume a job.
func (p *Peer) Pause(ctx context.Context, job string, paused bool) error {
	_, err := p.call(ctx, leaderCall{Method: "pause", Job: job, Paused: paused})
	return err
}

// Started tells the leader a worker began an attempt.
func (p *Peer) Started(ctx context.Context, attempt string, at time.Time) error {
	_, err := p.call(ctx, leaderCall{Method: "started", Attempt: attempt, At: at})
	return err
}

// Complete tells the leader how an attempt ended.
func (p *Peer) Complete(ctx context.Context, c scheduler.Completion) error {
	_, err := p.call(ctx, leaderCall{Method: "complete", Completion: &c})
	return err
}

// Note tells the leader what a node saw about an attempt.
func (p *Peer) Note(ctx context.Context, attempt, kind, node, detail string) error {
	_, err := p.call(ctx, leaderCall{Method: "note", Attempt: attempt, Kind: kind, Node: node, Detail: detail})
	return err
}

// Audit asks the leader to record an audit entry.
func (p *Peer) Audit(ctx context.Context, kind, node, detail string) error {
	_, err := p.call(ctx, leaderCall{Method: "audit", Kind: kind, Node: node, Detail: detail})
	return err
}

// Renew asks the leader once (renewals have their own rhythm) to renew an
// attempt's lease.
func (p *Peer) Renew(ctx context.Context, attempt, node string) (scheduler.RenewReply, error) {
	body, _ := json.Marshal(renewRequest{Attempt: attempt, Node: node})
	var reply scheduler.RenewReply
	err := p.callLeader(ctx, "/internal/v1/renew", body, &reply, nil)
	return reply, err
}

// Trigger asks the leader to start a run of job now (force: whatever its
// overlap policy says).
func (p *Peer) Trigger(ctx context.Context, job string, force bool) (jobs.Run, error) {
	body, _ := json.Marshal(triggerRequest{Job: job, Force: force})
	var run jobs.Run
	err := p.toLeader(ctx, "/internal/v1/trigger", body, &run, nil)
	return run, err
}

// Dispatch delivers an assignment to its worker: directly when it is this
// node, over the internal API otherwise.
func (p *Peer) Dispatch(ctx context.Context, worker string, a scheduler.Assignment) error {
	if worker == p.Self && p.Local != nil {
		if err := p.Local.Accept(a); err != nil {
			return err
		}
	} else {
		addr, err := p.NodeHTTP(worker)
		if err != nil {
			return err
		}
		body, _ := json.Marshal(a)
		if err := p.post(ctx, addr, "/internal/v1/dispatch", body, nil); err != nil {
			return err
		}
	}
	if p.Faults.TakeDispatchReply() {
		return errors.New("dispatch reply dropped (fault injection)")
	}
	return nil
}

// toLeader posts to the leader with retries; again reports whether a
// decoded answer means "ask again".
func (p *Peer) toLeader(ctx context.Context, path string, body []byte, out any, again func() bool) error {
	backoff := 50 * time.Millisecond
	for {
		err := p.callLeader(ctx, path, body, out, again)
		if err == nil {
			return nil
		}
		var he *httpError
		if errors.As(err, &he) && he.code < 500 && he.code != http.StatusUnauthorized {
			return err // the leader answered: a retry would get the same
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// errAskAgain is a node's answer that it does not lead.
var errAskAgain = errors.New("not the leader")

// callLeader posts once to the leader this node's gossip names. When that
// address cannot be reached or says it does not lead, it asks the servers,
// whose Raft knows, and posts once to the leader they name: gossip can
// take seconds to carry news of an election, and a lease cannot wait that
// long. With a deadline, the first try gets half of the time left, so a
// leader that is paused or cut off cannot use it all up.
func (p *Peer) callLeader(ctx context.Context, path string, body []byte, out any, again func() bool) error {
	try := func(ctx context.Context, addr string) error {
		err := p.post(ctx, addr, path, body, out)
		if err == nil && again != nil && again() {
			err = fmt.Errorf("%s%s: %w", addr, path, errAskAgain)
		}
		return err
	}
	addr, err := p.LeaderHTTP()
	if err == nil {
		first := ctx
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			first, cancel = context.WithTimeout(ctx, time.Until(dl)/2)
			defer cancel()
		}
		if err = try(first, addr); !notTheLeader(err) {
			return err
		}
	}
	alt, aerr := p.askServers(ctx, addr)
	if aerr != nil {
		return err
	}
	if err2 := try(ctx, alt); err2 != nil {
		return fmt.Errorf("%w (and before, from gossip's leader: %v)", err2, err)
	}
	return nil
}

// notTheLeader reports whether err means the address asked is not (or no
// longer) the leader's: unreachable, or an answer saying so.
func notTheLeader(err error) bool {
	var he *httpError
	switch {
	case err == nil:
		return false
	case errors.As(err, &he):
		return he.code == http.StatusServiceUnavailable
	}
	return true
}

// askServers returns the leader's HTTP address as the first alive server
// that knows one tells it, unless that is tried, the address that just
// failed.
func (p *Peer) askServers(ctx context.Context, tried string) (string, error) {
	if p.Servers == nil {
		return "", election.ErrNoLeader
	}
	for _, s := range p.Servers() {
		if s == tried {
			continue
		}
		if addr := p.askServer(ctx, s); addr != "" && addr != tried {
			return addr, nil
		}
	}
	return "", election.ErrNoLeader
}

func (p *Peer) askServer(ctx context.Context, server string) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+server+"/api/v1/status", nil)
	resp, err := p.client().Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st Status
	if json.NewDecoder(resp.Body).Decode(&st) != nil || st.Leader == "" {
		return ""
	}
	for _, m := range st.Members {
		if m.Name == st.Leader && m.Meta.HTTPAddr != "" {
			return m.Meta.HTTPAddr
		}
	}
	return ""
}

// httpError is a non-200 answer.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return fmt.Sprintf("%d: %s", e.code, e.msg) }

// errorsByMessage maps the JSON error text of a 4xx back to our sentinels,
// so callers can tell "no such job" from "try again".
func (e *httpError) Unwrap() error {
	switch e.code {
	case http.StatusNotFound:
		return jobs.ErrNotFound
	case http.StatusBadRequest:
		if strings.Contains(e.msg, jobs.ErrUnknownJob.Error()) {
			return jobs.ErrUnknownJob
		}
		return jobs.ErrInvalidConfig
	case http.StatusServiceUnavailable:
		return jobs.ErrNotLeader
	}
	return nil
}

func (p *Peer) post(ctx context.Context, addr, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e struct{ Error string }
		msg := string(bytes.TrimSpace(b))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return fmt.Errorf("%s%s: %w", addr, path, &httpError{code: resp.StatusCode, msg: msg})
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s%s: decode answer: %w", addr, path, err)
	}
	return nil
}
