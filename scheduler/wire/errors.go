package wire

import (
	"errors"
	"io"
	"net/http"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/fencedstore/errcode"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/history"
)

// Errors of a request itself, which no domain package owns. The public
// API and the node-to-node transport answer with them. A bad request and
// a wrong method are the same errors as the store's HTTP layer answers.
var (
	ErrBadRequest   = errcode.ErrBadRequest
	ErrUnauthorized = errors.New("unauthorized")
	ErrForbidden    = errors.New("forbidden")
	ErrMethod       = errcode.ErrMethod
	ErrUnavailable  = errors.New("unavailable")
	ErrMisdirected  = errors.New("misdirected request")
	ErrTooLarge     = errors.New("request too large")
	ErrTooMany      = errors.New("too many requests")
	// ErrNoRoute answers a path the server does not serve. Its code is
	// not jobs.ErrNotFound's: "no such job" is an answer about the
	// cluster, "no such path" one about the request (a wrong address, or
	// a node of another version), which a client must not take for the
	// other.
	ErrNoRoute = errors.New("not found")
)

// code is a row of the scheduler's own.
func code(name string, status int, errs ...error) errcode.Code {
	return errcode.Code{Name: name, Status: status, Errs: errs}
}

// table is the one mapping of errors to wire codes and statuses: the
// store's codes (fencedstore/errcode, which the store's HTTP layer on the
// same port answers with), each in its place, and the scheduler's. Where
// both answer with a code, With puts the scheduler's error first, which a
// decoded code then stands for. Order matters where an error wraps
// several: the first matching code wins, so errors of the request come
// before the domain's, and a narrower error before the one it is.
var table = errcode.New(
	errcode.BadRequest,
	code("bad_cursor", http.StatusBadRequest, history.ErrBadCursor),
	code("invalid", http.StatusBadRequest, jobs.ErrInvalidConfig),
	code("unknown_job", http.StatusBadRequest, jobs.ErrUnknownJob),
	code("acl_invalid", http.StatusBadRequest, acl.ErrUnknownCapability, acl.ErrBadNamespaceGlob, acl.ErrBadPolicy, acl.ErrBadToken, acl.ErrBadAction),
	code("unknown_policy", http.StatusBadRequest, acl.ErrUnknownPolicy),
	code("unknown_accessor", http.StatusNotFound, acl.ErrUnknownAccessor),
	code("already_revoked", http.StatusConflict, acl.ErrAlreadyRevoked),
	code("acl_bootstrapped", http.StatusConflict, acl.ErrAlreadyBootstrapped),
	code("acl_disabled", http.StatusBadRequest, acl.ErrNotBootstrapped),
	code("revoked_token", http.StatusUnauthorized, acl.ErrRevokedToken),
	code("expired_token", http.StatusUnauthorized, acl.ErrExpiredToken),
	code("unknown_token", http.StatusUnauthorized, acl.ErrUnknownToken),
	errcode.InvalidKey,
	errcode.InvalidJob,
	errcode.WritesDisabled,
	errcode.Unauthorized.With(ErrUnauthorized),
	errcode.BadToken,
	code("forbidden", http.StatusForbidden, ErrForbidden),
	errcode.OutOfScope,
	errcode.MethodNotAllowed,
	code("misdirected", http.StatusMisdirectedRequest, ErrMisdirected),
	code("too_many_requests", http.StatusTooManyRequests, ErrTooMany),
	errcode.TooLarge.With(ErrTooLarge),
	code("no_route", http.StatusNotFound, ErrNoRoute),
	errcode.NotFound.With(jobs.ErrNotFound),
	code("duplicate_run", http.StatusConflict, jobs.ErrDuplicateRun),
	code("stale_attempt", http.StatusConflict, jobs.ErrStaleAttempt),
	code("run_finished", http.StatusConflict, jobs.ErrRunFinished),
	code("not_covered", http.StatusConflict, history.ErrNotCovered),
	errcode.StaleOwner,
	errcode.Expired,
	errcode.Conflict,
	errcode.Quota,
	code("peer_alive", http.StatusConflict, election.ErrPeerAlive),
	code("no_such_peer", http.StatusNotFound, election.ErrNoSuchPeer),
	code("not_leader", http.StatusServiceUnavailable, jobs.ErrNotLeader, election.ErrNotLeader),
	code("no_leader", http.StatusServiceUnavailable, election.ErrNoLeader),
	errcode.Busy,
	errcode.Unavailable.With(ErrUnavailable),
)

// StatusOf is the status and code the node answers err with, from the
// table: the first code one of whose errors err matches (errors.Is), or
// 500 and errcode.CodeInternal.
func StatusOf(err error) (status int, code string) { return table.StatusOf(err) }

// Body is the answer to err.
func Body(err error) errcode.Body { return table.Body(err) }

// Decode turns an error answer (status not 2xx) back into an error: an
// *errcode.RemoteError standing for the error its code names in the
// table, or an *errcode.UnexpectedAnswer (errcode.Table.Decode).
func Decode(status int, contentType string, body []byte) error {
	return table.Decode(status, contentType, body)
}

// ItemErr is the error b stands for when it is one item of an answer that
// succeeded as a whole (a batch's): as Decode would make of it, with the
// status its code has in the table (500 for a code it does not name).
func ItemErr(b errcode.Body) error { return table.ItemErr(b) }

// ReadAnswer reads an answer of the API and closes its body: the body of
// a 2xx, or the error Decode makes of any other status.
func ReadAnswer(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, Decode(resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return b, nil
}
