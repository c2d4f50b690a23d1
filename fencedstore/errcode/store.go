package errcode

import (
	"errors"
	"net/http"

	"github.com/fencecron/fencecron/fencedstore"
)

// Errors of a request itself, which no domain package owns: the store's
// HTTP layer answers with them, and so does the scheduler's API.
var (
	ErrBadRequest = errors.New("bad request")
	ErrMethod     = errors.New("method not allowed")
	// ErrWritesDisabled: a store that takes no writes at all. Is
	// fencedstore.ErrUnauthorized, which is what the store's client reads
	// it as.
	ErrWritesDisabled error = &narrower{"writes disabled", fencedstore.ErrUnauthorized}
	// ErrBusy: too many bodies in flight; nothing was written. Is
	// fencedstore.ErrUnavailable, which is what the store's client reads it
	// as: the same call may be repeated.
	ErrBusy error = &narrower{"busy: too many bodies in flight; nothing was written, try again", fencedstore.ErrUnavailable}
)

// narrower is a sentinel that is also a broader one (errors.Is finds
// both) without the broader one's words in its message.
type narrower struct {
	msg   string
	wider error
}

func (e *narrower) Error() string { return e.msg }
func (e *narrower) Unwrap() error { return e.wider }

// The store's codes. The outcomes a write can be refused with keep their
// outcome's name, as `fencecron publish` and the store's history say them.
var (
	StaleOwner       = Code{string(fencedstore.StaleOwner), http.StatusConflict, []error{fencedstore.ErrStaleOwner}}
	Conflict         = Code{string(fencedstore.Conflict), http.StatusPreconditionFailed, []error{fencedstore.ErrConflict}}
	Expired          = Code{string(fencedstore.Expired), http.StatusConflict, []error{fencedstore.ErrExpired}}
	InvalidKey       = Code{"invalid_key", http.StatusBadRequest, []error{fencedstore.ErrInvalidKey}}
	InvalidJob       = Code{"invalid_job", http.StatusBadRequest, []error{fencedstore.ErrInvalidJob}}
	BadRequest       = Code{"bad_request", http.StatusBadRequest, []error{ErrBadRequest}}
	WritesDisabled   = Code{"writes_disabled", http.StatusForbidden, []error{ErrWritesDisabled}}
	Unauthorized     = Code{"unauthorized", http.StatusUnauthorized, []error{fencedstore.ErrUnauthorized}}
	BadToken         = Code{"bad_token", http.StatusUnauthorized, []error{fencedstore.ErrBadToken}}
	OutOfScope       = Code{"out_of_scope", http.StatusForbidden, []error{fencedstore.ErrOutOfScope}}
	NotFound         = Code{"not_found", http.StatusNotFound, []error{fencedstore.ErrNotFound}}
	MethodNotAllowed = Code{"method_not_allowed", http.StatusMethodNotAllowed, []error{ErrMethod}}
	TooLarge         = Code{"too_large", http.StatusRequestEntityTooLarge, []error{fencedstore.ErrTooLarge}}
	Quota            = Code{"quota", http.StatusInsufficientStorage, []error{fencedstore.ErrQuota}}
	Busy             = Code{"busy", http.StatusServiceUnavailable, []error{ErrBusy}}
	Unavailable      = Code{"unavailable", http.StatusServiceUnavailable, []error{fencedstore.ErrUnavailable, fencedstore.ErrClosed}}
)

// Store is the table of the store's HTTP layer (fencedstore/httpstore).
// Its order is the order these codes have in the node's table too
// (scheduler/wire): errors of the request first, a narrower error before
// the one it is (writes_disabled before unauthorized, busy before
// unavailable), so it keeps its own code.
var Store = New(
	BadRequest, InvalidKey, InvalidJob,
	WritesDisabled, Unauthorized, BadToken, OutOfScope,
	MethodNotAllowed, TooLarge, NotFound,
	StaleOwner, Expired, Conflict, Quota,
	Busy, Unavailable,
)
