package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/history"
)

// Errors of a request itself, which no domain package owns. The public
// API and the node-to-node transport answer with them.
var (
	ErrBadRequest   = errors.New("bad request")
	ErrUnauthorized = errors.New("unauthorized")
	ErrForbidden    = errors.New("forbidden")
	ErrMethod       = errors.New("method not allowed")
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

// ErrorBody is the JSON body of every error answer of the public API and
// the transport. Code is what a client decodes; Error is for people.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// CodeInternal is the code of an error the table does not name.
const CodeInternal = "internal"

// row is one entry of the table: the code, its status, and the errors
// that answer with it. A decoded code stands for the first of them.
type row struct {
	code   string
	status int
	errs   []error
}

// table is the one mapping of errors to wire codes and statuses. Order
// matters where an error wraps several: the first matching row wins, so
// errors of the request come before the domain's. Where it overlaps the
// store's own codes (fencedstore/httpstore.StatusOf, a separate contract
// with the jobs' `fencecron publish`), it agrees with them; a test checks.
var table = []row{
	{"bad_request", http.StatusBadRequest, []error{ErrBadRequest}},
	{"bad_cursor", http.StatusBadRequest, []error{history.ErrBadCursor}},
	{"invalid", http.StatusBadRequest, []error{jobs.ErrInvalidConfig}},
	{"unknown_job", http.StatusBadRequest, []error{jobs.ErrUnknownJob}},
	{"invalid_key", http.StatusBadRequest, []error{fencedstore.ErrInvalidKey}},
	{"unauthorized", http.StatusUnauthorized, []error{ErrUnauthorized, fencedstore.ErrUnauthorized}},
	{"bad_token", http.StatusUnauthorized, []error{fencedstore.ErrBadToken}},
	{"forbidden", http.StatusForbidden, []error{ErrForbidden}},
	{"out_of_scope", http.StatusForbidden, []error{fencedstore.ErrOutOfScope}},
	{"method_not_allowed", http.StatusMethodNotAllowed, []error{ErrMethod}},
	{"misdirected", http.StatusMisdirectedRequest, []error{ErrMisdirected}},
	{"too_many_requests", http.StatusTooManyRequests, []error{ErrTooMany}},
	{"too_large", http.StatusRequestEntityTooLarge, []error{ErrTooLarge, fencedstore.ErrTooLarge}},
	{"no_route", http.StatusNotFound, []error{ErrNoRoute}},
	{"not_found", http.StatusNotFound, []error{jobs.ErrNotFound, fencedstore.ErrNotFound}},
	{"duplicate_run", http.StatusConflict, []error{jobs.ErrDuplicateRun}},
	{"stale_attempt", http.StatusConflict, []error{jobs.ErrStaleAttempt}},
	{"run_finished", http.StatusConflict, []error{jobs.ErrRunFinished}},
	{"not_covered", http.StatusConflict, []error{history.ErrNotCovered}},
	{string(fencedstore.StaleOwner), http.StatusConflict, []error{fencedstore.ErrStaleOwner}},
	{string(fencedstore.Expired), http.StatusConflict, []error{fencedstore.ErrExpired}},
	{string(fencedstore.Conflict), http.StatusPreconditionFailed, []error{fencedstore.ErrConflict}},
	{"quota", http.StatusInsufficientStorage, []error{fencedstore.ErrQuota}},
	{"peer_alive", http.StatusConflict, []error{election.ErrPeerAlive}},
	{"no_such_peer", http.StatusNotFound, []error{election.ErrNoSuchPeer}},
	{"not_leader", http.StatusServiceUnavailable, []error{jobs.ErrNotLeader, election.ErrNotLeader}},
	{"no_leader", http.StatusServiceUnavailable, []error{election.ErrNoLeader}},
	{"unavailable", http.StatusServiceUnavailable, []error{ErrUnavailable, fencedstore.ErrUnavailable, fencedstore.ErrClosed}},
}

// StatusOf is the one place errors become HTTP status codes and wire
// codes: the first row of the table one of whose errors err matches
// (errors.Is), or 500 and CodeInternal.
func StatusOf(err error) (status int, code string) {
	for _, r := range table {
		for _, e := range r.errs {
			if errors.Is(err, e) {
				return r.status, r.code
			}
		}
	}
	return http.StatusInternalServerError, CodeInternal
}

// Body is the answer to err.
func Body(err error) ErrorBody {
	_, code := StatusOf(err)
	return ErrorBody{Error: err.Error(), Code: code}
}

// lookup returns the row of code.
func lookup(code string) (row, bool) {
	for _, r := range table {
		if r.code == code {
			return r, true
		}
	}
	return row{}, false
}

// RemoteError is an error a fencecron server answered with: its status,
// its wire code and message, and the error the code stands for
// (errors.Is works; nothing for CodeInternal or a code this version does
// not know).
type RemoteError struct {
	Status  int
	Code    string
	Message string
	err     error
}

func (e *RemoteError) Error() string { return e.Message }

// Unwrap returns the error the code stands for, if any.
func (e *RemoteError) Unwrap() error { return e.err }

// UnexpectedAnswer is an error answer that is not a fencecron server's
// structured error: a proxy's page, another server's 404, a body cut
// short. It stands for no domain error: whatever its status, it says
// nothing about the job, the run or the attempt, only that the request
// did not reach a fencecron endpoint that answered it, so a caller treats
// it as a failure of the transport and may retry.
type UnexpectedAnswer struct {
	Status      int
	ContentType string
	// Body is the start of the answer, for the message.
	Body string
}

func (e *UnexpectedAnswer) Error() string {
	return fmt.Sprintf("unexpected answer %d %s (%s): %q", e.Status, http.StatusText(e.Status), orNone(e.ContentType), e.Body)
}

func orNone(s string) string {
	if s == "" {
		return "no content type"
	}
	return s
}

// Decode turns an error answer (status not 2xx) back into an error. A
// domain error comes only from the structured body a fencecron server
// writes (JSON with a code), never from the status alone: a body that is
// not JSON, has no code, or carries a known code with a status the table
// does not give it, is an *UnexpectedAnswer. A well-formed body with a
// code this version does not know is a *RemoteError that stands for no
// error of ours.
func Decode(status int, contentType string, body []byte) error {
	unexpected := &UnexpectedAnswer{Status: status, ContentType: contentType, Body: snippet(body)}
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt != "application/json" {
		return unexpected
	}
	var b ErrorBody
	if err := json.Unmarshal(body, &b); err != nil || b.Code == "" || b.Error == "" {
		return unexpected
	}
	re := &RemoteError{Status: status, Code: b.Code, Message: b.Error}
	if b.Code == CodeInternal {
		if status != http.StatusInternalServerError {
			return unexpected
		}
		return re
	}
	r, ok := lookup(b.Code)
	switch {
	case !ok:
		return re
	case r.status != status:
		return unexpected
	}
	re.err = r.errs[0]
	return re
}

// Err is the error b stands for when it is one item of an answer that
// succeeded as a whole (a batch's): as Decode would make of it, with the
// status its code has in the table (500 for a code it does not name).
func (b ErrorBody) Err() error {
	re := &RemoteError{Status: http.StatusInternalServerError, Code: b.Code, Message: b.Error}
	if re.Message == "" {
		re.Message = b.Code
	}
	if r, ok := lookup(b.Code); ok {
		re.Status, re.err = r.status, r.errs[0]
	}
	return re
}

// snippet is the start of an answer's body, for error messages.
func snippet(b []byte) string {
	const limit = 200
	s := strings.TrimSpace(string(b))
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	return s
}

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
