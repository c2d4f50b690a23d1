package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/jobs"
)

// Every error of the table survives the trip: the server's StatusOf and
// Body, then the client's Decode, give back an error that Is the one a
// code stands for, whatever wrapped it on the way.
func TestStatusOf_RoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range table {
		if seen[r.code] {
			t.Errorf("code %q appears twice in the table", r.code)
		}
		seen[r.code] = true
		for _, e := range r.errs {
			t.Run(r.code+"/"+e.Error(), func(t *testing.T) {
				err := fmt.Errorf("complete w1@1.1 (on n2): %w", e)
				status, code := StatusOf(err)
				if status != r.status || code != r.code {
					t.Fatalf("StatusOf(%v) = %d %q, want %d %q", err, status, code, r.status, r.code)
				}
				body, _ := json.Marshal(Body(err))
				got := Decode(status, "application/json", body)
				var re *RemoteError
				if !errors.As(got, &re) || re.Code != code || re.Message != err.Error() {
					t.Fatalf("Decode = %#v, want a RemoteError with code %q and the message", got, code)
				}
				if !errors.Is(got, r.errs[0]) {
					t.Errorf("decoded %q does not match %v", code, r.errs[0])
				}
			})
		}
	}
}

// The three mappings of issue 12 disagreed; these are the answers that
// matter, pinned.
func TestStatusOf_Pinned(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fencedstore.ErrBadToken, 401, "bad_token"},
		{jobs.ErrNotFound, 404, "not_found"},
		{ErrNoRoute, 404, "no_route"},
		{jobs.ErrNotLeader, 503, "not_leader"},
		{election.ErrNotLeader, 503, "not_leader"},
		{election.ErrNoLeader, 503, "no_leader"},
		{jobs.ErrStaleAttempt, 409, "stale_attempt"},
		{jobs.ErrInvalidConfig, 400, "invalid"},
		{jobs.ErrTokenRange, 500, CodeInternal},
		{errors.New("disk on fire"), 500, CodeInternal},
		// The first row that matches wins.
		{fmt.Errorf("%w: job set: %w", ErrBadRequest, jobs.ErrInvalidConfig), 400, "bad_request"},
	} {
		if status, code := StatusOf(tc.err); status != tc.status || code != tc.code {
			t.Errorf("StatusOf(%v) = %d %q, want %d %q", tc.err, status, code, tc.status, tc.code)
		}
	}
}

// Where the store's HTTP layer answers the same errors (its own contract
// with `fencecron publish`), it answers them the same way.
func TestStatusOf_AgreesWithTheStore(t *testing.T) {
	for _, e := range []error{
		fencedstore.ErrStaleOwner, fencedstore.ErrConflict, fencedstore.ErrExpired, fencedstore.ErrNotFound,
		fencedstore.ErrInvalidKey, fencedstore.ErrTooLarge, fencedstore.ErrBadToken, fencedstore.ErrUnauthorized,
		fencedstore.ErrOutOfScope, fencedstore.ErrQuota, fencedstore.ErrUnavailable, fencedstore.ErrClosed,
	} {
		ws, wc := StatusOf(e)
		ss, sc := httpstore.StatusOf(e)
		if ws != ss || wc != sc {
			t.Errorf("%v: wire answers %d %q, the store %d %q", e, ws, wc, ss, sc)
		}
	}
}

// A domain error is read only from the body a fencecron server wrote:
// the status alone, a proxy's page or a mismatched code is a failure of
// the transport, which stands for no error of ours.
func TestDecode_OnlyFromTheStructuredBody(t *testing.T) {
	js := "application/json"
	for _, tc := range []struct {
		name        string
		status      int
		contentType string
		body        string
		want        error // nil: an UnexpectedAnswer
	}{
		{"our not_found", 404, js, `{"error":"attempt x: not found","code":"not_found"}`, jobs.ErrNotFound},
		{"our not_leader", 503, "application/json; charset=utf-8", `{"error":"not the leader","code":"not_leader"}`, jobs.ErrNotLeader},
		{"a proxy's 404 page", 404, "text/html", `<html><body>404 Not Found</body></html>`, nil},
		{"Go's default 404", 404, "text/plain; charset=utf-8", "404 page not found\n", nil},
		{"a 404 in JSON without a code", 404, js, `{"error":"not found"}`, nil},
		{"an older node's answer", 400, js, `{"error":"unknown job"}`, nil},
		{"a code with the wrong status", 404, js, `{"error":"x","code":"not_leader"}`, nil},
		{"not_found under a 502", 502, js, `{"error":"x","code":"not_found"}`, nil},
		{"a body cut short", 404, js, `{"error":"attempt x: not fo`, nil},
		{"no body", 404, js, ``, nil},
		{"internal with another status", 404, js, `{"error":"x","code":"internal"}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Decode(tc.status, tc.contentType, []byte(tc.body))
			if tc.want == nil {
				var ua *UnexpectedAnswer
				if !errors.As(err, &ua) || ua.Status != tc.status {
					t.Fatalf("Decode = %#v, want an UnexpectedAnswer", err)
				}
				for _, domain := range []error{jobs.ErrNotFound, jobs.ErrNotLeader, jobs.ErrInvalidConfig, jobs.ErrUnknownJob, fencedstore.ErrNotFound} {
					if errors.Is(err, domain) {
						t.Errorf("%v reads as %v", err, domain)
					}
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("Decode = %v, want %v", err, tc.want)
			}
		})
	}
	// A code from a newer server: its answer, but no error of ours.
	err := Decode(http.StatusConflict, js, []byte(`{"error":"overlaps run x","code":"overlap_forbidden"}`))
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != "overlap_forbidden" || errors.Unwrap(err) != nil {
		t.Errorf("unknown code: %#v, want a RemoteError standing for nothing", err)
	}
}
