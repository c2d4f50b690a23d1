package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/fencedstore/errcode"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/specjson"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/history"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// Server answers other nodes' calls under Prefix. It is an http.Handler
// for the node's HTTP server to route every request under Prefix to; it
// is safe for concurrent use once its fields are set.
type Server struct {
	// Leader answers the calls to the leader: the scheduler's Local(),
	// which says jobs.ErrNotLeader when this node does not lead, so the
	// caller looks for the leader again.
	Leader scheduler.Forwarder
	// Worker takes the assignments dispatched to this node; nil if it
	// runs no jobs.
	Worker interface {
		Accept(worker.Assignment) error
	}
	// History answers other servers' backfills from this server's run
	// history; nil on a node that keeps none (a worker).
	History interface {
		Range(history.RangeRequest) (history.RangePage, error)
	}
	Logger *slog.Logger
	// Clock is this node's wall clock, stamped on every answer
	// (TimeHeader); nil: the system clock.
	Clock jobs.Clock

	once   sync.Once
	routes map[string]http.HandlerFunc
}

// ServeHTTP admits only nodes of the cluster: over TLS, with a client
// certificate the cluster's CA issued (clustertls.IsPeer). A stranger, or
// a job's process, cannot call it however it reaches the port, and learns
// nothing of its paths.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !clustertls.IsPeer(r.TLS) {
		s.fail(w, r, fmt.Errorf("%w: the internal API takes only nodes of this cluster, over TLS with the cluster's certificate", wire.ErrUnauthorized))
		return
	}
	s.once.Do(s.init)
	s.stampTime(w)
	h, ok := s.routes[strings.TrimPrefix(r.URL.Path, Prefix)]
	switch {
	case !ok || !strings.HasPrefix(r.URL.Path, Prefix+"/"):
		s.fail(w, r, fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, wire.ErrNoRoute))
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		s.fail(w, r, fmt.Errorf("%w: %s is not allowed on %s", wire.ErrMethod, r.Method, r.URL.Path))
	default:
		h(w, r)
	}
}

// init builds the route table once, on the first call, so that the
// fields may be set in any order after the Server is made.
func (s *Server) init() {
	s.routes = make(map[string]http.HandlerFunc)
	s.leaderRoutes()
	s.leaderBatchRoutes()
	s.workerRoutes()
	s.nodeRoutes()
	if s.Leader == nil {
		s.refuseLeaderRoutes()
	}
}

// leaderRoutes are the Forwarder's calls one at a time: each checks what
// it requires and hands the request to the leader, which re-validates it.
func (s *Server) leaderRoutes() {
	s.routes[pathSetJobs] = handleMax(s, maxSetJobsBody, func(ctx context.Context, req setJobsRequest) (setJobsReply, error) {
		hash, err := s.Leader.SetJobs(ctx, req.Jobs, req.Source, req.Scope)
		return setJobsReply{Hash: hash}, err
	})
	s.routes[pathSetJobsChanges] = handleMax(s, maxSetJobsBody, func(ctx context.Context, req setJobsChangesRequest) (setJobsChangesReply, error) {
		hash, n, err := s.Leader.SetJobsChanges(ctx, scheduler.JobChanges{Base: req.Base, Upsert: req.Upsert, Remove: req.Remove}, req.Source)
		switch {
		case errors.Is(err, fsm.ErrJobsDiffBase):
			return setJobsChangesReply{Stale: true}, nil
		case errors.Is(err, scheduler.ErrChangesNeedSet):
			return setJobsChangesReply{NeedSet: true}, nil
		}
		return setJobsChangesReply{Hash: hash, Jobs: n}, err
	})
	trigger := handle(s, func(ctx context.Context, req triggerRequest) (jobs.Run, error) {
		if err := required("job", req.Job); err != nil {
			return jobs.Run{}, err
		}
		return s.Leader.TriggerAt(ctx, req.Job, req.Force, req.At)
	})
	s.routes[pathTrigger], s.routes[pathTriggerAt] = trigger, trigger
	s.routes[pathPause] = handle(s, func(ctx context.Context, req pauseRequest) (done, error) {
		if err := required("job", req.Job); err != nil {
			return done{}, err
		}
		return done{}, s.Leader.Pause(ctx, req.Job, req.Paused)
	})
	s.routes[pathStarted] = handle(s, func(ctx context.Context, req startedRequest) (done, error) {
		if err := required("attempt", req.Attempt); err != nil {
			return done{}, err
		}
		return done{}, s.Leader.Started(ctx, req.Attempt, req.At)
	})
	s.routes[pathComplete] = handle(s, func(ctx context.Context, req replicated.Completion) (done, error) {
		if err := required("attempt", req.Attempt); err != nil {
			return done{}, err
		}
		return done{}, s.Leader.Complete(ctx, req)
	})
	s.routes[pathNote] = handle(s, func(ctx context.Context, req noteRequest) (done, error) {
		if err := required("attempt", req.Attempt, "kind", req.Kind); err != nil {
			return done{}, err
		}
		return done{}, s.Leader.Note(ctx, req.Attempt, req.Kind, req.Node, req.Detail)
	})
	s.routes[pathAudit] = handle(s, func(ctx context.Context, req auditRequest) (done, error) {
		if err := required("kind", req.Kind); err != nil {
			return done{}, err
		}
		return done{}, s.Leader.Audit(ctx, req.Kind, req.Node, req.Detail)
	})
	s.routes[pathRenew] = handle(s, func(ctx context.Context, req renewRequest) (worker.RenewReply, error) {
		if err := required("attempt", req.Attempt, "node", req.Node); err != nil {
			return worker.RenewReply{}, err
		}
		return s.Leader.Renew(ctx, req.Attempt, req.Node)
	})
	s.routes[pathRelease] = handle(s, s.release)
	s.routes[pathBackfill] = handle(s, s.backfillRoute())
	s.routes[pathACL] = handle(s, s.aclRoute())
}

// release ends an attempt's lease on an operator's word, through the
// leader.
func (s *Server) release(ctx context.Context, req releaseRequest) (scheduler.Released, error) {
	if err := required("attempt", req.Attempt, "reason", req.Reason); err != nil {
		return scheduler.Released{}, err
	}
	return s.Leader.Release(ctx, req.Attempt, req.Reason, req.Asker)
}

// leaderBatchRoutes are the calls that carry many reports at once.
func (s *Server) leaderBatchRoutes() {
	s.routes[pathCompleteMany] = handle(s, s.completeMany)
	s.routes[pathRenewMany] = handle(s, s.renewMany)
}

func (s *Server) completeMany(ctx context.Context, req completeManyRequest) (completeManyReply, error) {
	if len(req.Completions) == 0 || len(req.Completions) > maxCompleteMany {
		return completeManyReply{}, fmt.Errorf("%w: %d completions: want 1 to %d", wire.ErrBadRequest, len(req.Completions), maxCompleteMany)
	}
	// An item without an attempt is refused alone, by the leader's
	// checkCompletion: the rest of the batch is recorded.
	errs, err := s.Leader.CompleteMany(ctx, req.Completions)
	if err != nil {
		return completeManyReply{}, err
	}
	reply := completeManyReply{Errors: make([]*errcode.Body, len(errs))}
	for i, e := range errs {
		if e != nil {
			b := wire.Body(e)
			reply.Errors[i] = &b
		}
	}
	return reply, nil
}

func (s *Server) renewMany(ctx context.Context, req renewManyRequest) (renewManyReply, error) {
	rs, err := renewals(req)
	if err != nil {
		return renewManyReply{}, err
	}
	replies, err := s.Leader.RenewMany(ctx, req.Node, rs)
	return renewManyReply{Replies: replies}, err
}

// renewals checks a renew_many request whole before any of it reaches
// the leader, so that a bad item renews nothing.
func renewals(req renewManyRequest) ([]worker.Renewal, error) {
	if err := required("node", req.Node); err != nil {
		return nil, err
	}
	if len(req.Attempts) == 0 || len(req.Attempts) > maxRenewMany {
		return nil, fmt.Errorf("%w: %d attempts: want 1 to %d", wire.ErrBadRequest, len(req.Attempts), maxRenewMany)
	}
	if req.Starts != nil && len(req.Starts) != len(req.Attempts) {
		return nil, fmt.Errorf("%w: %d starts for %d attempts", wire.ErrBadRequest, len(req.Starts), len(req.Attempts))
	}
	if req.PreStart != nil && (req.Starts == nil || len(req.PreStart) != len(req.Attempts)) {
		return nil, fmt.Errorf("%w: %d pre_start flags for %d attempts (and starts with them)", wire.ErrBadRequest, len(req.PreStart), len(req.Attempts))
	}
	rs := make([]worker.Renewal, len(req.Attempts))
	for i, a := range req.Attempts {
		if err := required("attempt", a); err != nil {
			return nil, err
		}
		rs[i] = worker.Renewal{Attempt: a, Confirming: req.Starts != nil}
		if req.Starts != nil {
			rs[i].Start = req.Starts[i]
		}
		if req.PreStart != nil {
			rs[i].PreStart = req.PreStart[i]
		}
	}
	return rs, nil
}

// workerRoutes are the leader's calls to this node's worker, and the
// questions asked of it about what it runs.
func (s *Server) workerRoutes() {
	s.routes[pathDispatch] = handle(s, s.dispatch)
	s.routes[pathDispatchMany] = handle(s, s.dispatchMany)
	s.routes[pathOutput] = handle(s, func(ctx context.Context, req worker.OutputRequest) (worker.LiveOutput, error) {
		return s.output(req)
	})
}

func (s *Server) dispatch(ctx context.Context, a worker.Assignment) (dispatchReply, error) {
	if err := required("attempt.id", a.Attempt.ID); err != nil {
		return dispatchReply{}, err
	}
	if s.Worker == nil {
		return dispatchReply{}, fmt.Errorf("%w: this node runs no jobs", wire.ErrBadRequest)
	}
	if err := s.Worker.Accept(a); err != nil {
		return dispatchReply{}, fmt.Errorf("%w: %v", wire.ErrUnavailable, err)
	}
	return dispatchReply{Accepted: a.Attempt.ID}, nil
}

// dispatchMany checks every assignment before accepting any, so that a
// malformed batch starts nothing.
func (s *Server) dispatchMany(ctx context.Context, as []worker.Assignment) (dispatchManyReply, error) {
	if s.Worker == nil {
		return dispatchManyReply{}, fmt.Errorf("%w: this node runs no jobs", wire.ErrBadRequest)
	}
	if len(as) == 0 || len(as) > maxDispatchMany {
		return dispatchManyReply{}, fmt.Errorf("%w: %d assignments: want 1 to %d", wire.ErrBadRequest, len(as), maxDispatchMany)
	}
	for _, a := range as {
		if err := required("attempt.id", a.Attempt.ID); err != nil {
			return dispatchManyReply{}, err
		}
	}
	reply := dispatchManyReply{Accepted: make([]string, 0, len(as))}
	for _, a := range as {
		if err := s.Worker.Accept(a); err != nil {
			return dispatchManyReply{}, fmt.Errorf("%w: %s: %v", wire.ErrUnavailable, a.Attempt.ID, err)
		}
		reply.Accepted = append(reply.Accepted, a.Attempt.ID)
	}
	return reply, nil
}

// nodeRoutes are what any node answers, whatever its role: its history,
// its clock, and the path older versions still call.
func (s *Server) nodeRoutes() {
	s.routes[pathHistoryRange] = handle(s, func(ctx context.Context, req history.RangeRequest) (history.RangePage, error) {
		if s.History == nil {
			return history.RangePage{}, fmt.Errorf("%w: this node keeps no run history", history.ErrNotCovered)
		}
		return s.History.Range(req)
	})
	s.routes[pathTime] = handle(s, func(context.Context, done) (done, error) { return done{}, nil })
	s.routes[pathRetired] = func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, fmt.Errorf("%w: %s: this node takes typed calls only, not the encoded log commands of older versions: upgrade the caller", wire.ErrUnavailable, r.URL.Path))
	}
}

// refuseLeaderRoutes answers the Forwarder's calls on a node without a
// scheduler with jobs.ErrNotLeader, which sends the caller to look for
// the leader elsewhere rather than call a nil Leader.
func (s *Server) refuseLeaderRoutes() {
	for _, p := range []string{pathSetJobs, pathSetJobsChanges, pathTrigger, pathTriggerAt, pathPause, pathStarted, pathComplete, pathCompleteMany, pathNote, pathAudit, pathRenew, pathRenewMany, pathRelease, pathBackfill, pathACL} {
		s.routes[p] = func(w http.ResponseWriter, r *http.Request) {
			s.fail(w, r, fmt.Errorf("%s: this node has no scheduler: %w", r.URL.Path, jobs.ErrNotLeader))
		}
	}
}

// handle makes an endpoint of call: decode the request strictly, make
// the one call, answer with its reply or its error.
func handle[Req, Reply any](s *Server, call func(context.Context, Req) (Reply, error)) http.HandlerFunc {
	return handleMax(s, maxBody, call)
}

// handleMax is handle with a body of at most limit bytes.
func handleMax[Req, Reply any](s *Server, limit int64, call func(context.Context, Req) (Reply, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := decodeBody(http.MaxBytesReader(w, r.Body, limit), &req); err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				s.fail(w, r, fmt.Errorf("%w: %s takes at most %d bytes", wire.ErrTooLarge, r.URL.Path, limit))
				return
			}
			s.fail(w, r, fmt.Errorf("%w: decode %s body: %v", wire.ErrBadRequest, r.URL.Path, err))
			return
		}
		reply, err := call(r.Context(), req)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, reply)
	}
}

// plainDecoder is a request that reads a body of json.Marshal's own
// layout faster than encoding/json; ok is false for any other, which
// encoding/json then decodes.
type plainDecoder interface {
	decodePlain(body []byte) (ok bool)
}

// decodeBody decodes the request body into req as a json.Decoder that
// refuses unknown fields does: directly where req is a plainDecoder and
// the body plain.
func decodeBody[Req any](body io.Reader, req *Req) error {
	if p, plain := any(req).(plainDecoder); plain {
		b, err := io.ReadAll(body)
		if err != nil {
			return err
		}
		if p.decodePlain(b) {
			return nil
		}
		*req, body = *new(Req), bytes.NewReader(b)
	}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	return dec.Decode(req)
}

// decodePlain reads a forwarded apply as encodeSetJobs writes it when
// it has no scope: the whole set read by specjson.
func (req *setJobsRequest) decodePlain(body []byte) bool {
	rest, ok := bytes.CutPrefix(bytes.TrimRight(body, " \t\r\n"), []byte(`{"jobs":`))
	if !ok {
		return false
	}
	specs, n, ok := specjson.Decode(rest, make([]jobs.Spec, 0, jobs.CountSpecs(rest)))
	if !ok {
		return false
	}
	rest, ok = bytes.CutPrefix(rest[n:], []byte(`,"source":`))
	if !ok {
		return false
	}
	source, n, ok := specjson.String(rest)
	if !ok || string(rest[n:]) != "}" {
		return false
	}
	req.Jobs, req.Source = specs, source
	return true
}

// required names the first of the (name, value) pairs whose value is
// empty.
func required(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			return fmt.Errorf("%w: %s is required", wire.ErrBadRequest, pairs[i])
		}
	}
	return nil
}

// fail answers err as the table in scheduler/wire codes it.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, _ := wire.StatusOf(err)
	switch {
	case status == http.StatusServiceUnavailable:
		// Not the leader, or no leader yet: the caller looks again.
		s.logger().Debug("internal call refused for now", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
	case status >= 500:
		s.logger().Error("internal call failed", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Fencecron-Node realm="fencecron cluster"`)
	}
	writeJSON(w, status, wire.Body(err))
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
