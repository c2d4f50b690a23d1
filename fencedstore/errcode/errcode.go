// Package errcode is the one table of fencecron's HTTP error answers:
// each code, the status it answers with and the errors it stands for;
// and RemoteError, what a client makes of such an answer.
//
// Every endpoint of a node answers an error as JSON {"error", "code"}, and
// one code means one thing on all of them: the store's (fencedstore/
// httpstore, mounted on the node's port) and the scheduler's (the public
// API and the node-to-node transport, scheduler/wire). So there is one
// table, built in two steps: this package declares the store's codes
// (Store), and scheduler/wire builds the node's table from them and its
// own (New with the Codes below, With for a code both sides answer with).
// It sits beside the store, importing only fencedstore, because the store
// is the bottom layer and imports nothing above it.
package errcode

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
)

// Code is one row of a table: a wire code, the HTTP status it answers
// with, and the errors that answer with it. A decoded code stands for the
// first of them.
type Code struct {
	Name   string
	Status int
	Errs   []error
}

// With returns c answering also for errs, placed first: in a table built
// with it, a decoded c stands for errs[0]. It is how the scheduler's API
// shares a code with the store (not_found is a job's as well as a key's)
// while each side's client reads the code as its own error.
func (c Code) With(errs ...error) Code {
	c.Errs = append(append([]error(nil), errs...), c.Errs...)
	return c
}

// Table maps errors to codes and back. It is read-only once built and safe
// for concurrent use.
type Table struct {
	codes []Code
}

// New returns the table of codes, in order: where an error matches the
// errors of several codes (it wraps several), the first code wins. It
// panics on a code named twice, which only a bad table can cause.
func New(codes ...Code) *Table {
	seen := map[string]bool{}
	for _, c := range codes {
		if seen[c.Name] || c.Name == "" || c.Name == CodeInternal || len(c.Errs) == 0 {
			panic(fmt.Sprintf("errcode: bad or repeated code %q", c.Name))
		}
		seen[c.Name] = true
	}
	return &Table{codes: append([]Code(nil), codes...)}
}

// Codes returns the table's codes, in order.
func (t *Table) Codes() []Code { return append([]Code(nil), t.codes...) }

// CodeInternal is the code of an error the table does not name.
const CodeInternal = "internal"

// StatusOf is the one place errors become HTTP status codes and wire
// codes: the first code of t one of whose errors err matches (errors.Is),
// or 500 and CodeInternal.
func (t *Table) StatusOf(err error) (status int, code string) {
	for _, c := range t.codes {
		for _, e := range c.Errs {
			if errors.Is(err, e) {
				return c.Status, c.Name
			}
		}
	}
	return http.StatusInternalServerError, CodeInternal
}

// Lookup returns the code named name.
func (t *Table) Lookup(name string) (Code, bool) {
	for _, c := range t.codes {
		if c.Name == name {
			return c, true
		}
	}
	return Code{}, false
}

// Body is the JSON body of every error answer. Code is what a client
// decodes; Error is for people.
type Body struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Missing names the capability a refused caller lacks (access
	// control: an error with a MissingCapability method).
	Missing string `json:"missing,omitempty"`
}

// Body is the answer to err.
func (t *Table) Body(err error) Body {
	_, code := t.StatusOf(err)
	b := Body{Error: err.Error(), Code: code}
	var m interface{ MissingCapability() string }
	if errors.As(err, &m) {
		b.Missing = m.MissingCapability()
	}
	return b
}

// RemoteError is an error a fencecron server answered with: its status,
// its wire code and message, and the error the code stands for. The
// store's client and the scheduler's both return it, so errors.As finds
// the answer, and errors.Is the error it stands for, whichever decoded it.
type RemoteError struct {
	Status  int
	Code    string
	Message string
	// Err is the error Code stands for in the decoding table (or the one
	// its client chose for an answer without a code it knows); nil for
	// CodeInternal or a code this version does not know.
	Err error
}

func (e *RemoteError) Error() string { return e.Message }

// Unwrap returns the error the code stands for, if any.
func (e *RemoteError) Unwrap() error { return e.Err }

// Remote is the RemoteError of an answer with status and body b, standing
// for the error t gives b's code (nothing for a code t does not know).
// Unlike Decode it takes the answer as it is; a client with a stricter
// rule checks first.
func (t *Table) Remote(status int, b Body) *RemoteError {
	re := &RemoteError{Status: status, Code: b.Code, Message: b.Error}
	if c, ok := t.Lookup(b.Code); ok {
		re.Err = c.Errs[0]
	}
	return re
}

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
func (t *Table) Decode(status int, contentType string, body []byte) error {
	unexpected := &UnexpectedAnswer{Status: status, ContentType: contentType, Body: snippet(body)}
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt != "application/json" {
		return unexpected
	}
	var b Body
	if err := json.Unmarshal(body, &b); err != nil || b.Code == "" || b.Error == "" {
		return unexpected
	}
	if b.Code == CodeInternal {
		if status != http.StatusInternalServerError {
			return unexpected
		}
		return t.Remote(status, b)
	}
	if c, ok := t.Lookup(b.Code); ok && c.Status != status {
		return unexpected
	}
	return t.Remote(status, b)
}

// ItemErr is the error b stands for when it is one item of an answer
// that succeeded as a whole (a batch's): as Decode would make of it, with
// the status its code has in t (500 for a code t does not name).
func (t *Table) ItemErr(b Body) error {
	status := http.StatusInternalServerError
	if c, ok := t.Lookup(b.Code); ok {
		status = c.Status
	}
	re := t.Remote(status, b)
	if re.Message == "" {
		re.Message = b.Code
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
