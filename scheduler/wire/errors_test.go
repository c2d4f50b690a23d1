package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/errcode"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/jobs"
)

// Every error of the table survives the trip: the server's StatusOf and
// Body, then the client's Decode, give back an error that Is the one a
// code stands for, whatever wrapped it on the way.
func TestStatusOf_RoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range table.Codes() {
		if seen[r.Name] {
			t.Errorf("code %q appears twice in the table", r.Name)
		}
		seen[r.Name] = true
		for _, e := range r.Errs {
			t.Run(r.Name+"/"+e.Error(), func(t *testing.T) {
				err := fmt.Errorf("complete w1@1.1 (on n2): %w", e)
				status, code := StatusOf(err)
				if status != r.Status || code != r.Name {
					t.Fatalf("StatusOf(%v) = %d %q, want %d %q", err, status, code, r.Status, r.Name)
				}
				body, _ := json.Marshal(Body(err))
				got := Decode(status, "application/json", body)
				var re *errcode.RemoteError
				if !errors.As(got, &re) || re.Code != code || re.Message != err.Error() {
					t.Fatalf("Decode = %#v, want a RemoteError with code %q and the message", got, code)
				}
				if !errors.Is(got, r.Errs[0]) {
					t.Errorf("decoded %q does not match %v", code, r.Errs[0])
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
		{jobs.ErrTokenRange, 500, errcode.CodeInternal},
		{errors.New("disk on fire"), 500, errcode.CodeInternal},
		// The first row that matches wins.
		{fmt.Errorf("%w: job set: %w", ErrBadRequest, jobs.ErrInvalidConfig), 400, "bad_request"},
	} {
		if status, code := StatusOf(tc.err); status != tc.status || code != tc.code {
			t.Errorf("StatusOf(%v) = %d %q, want %d %q", tc.err, status, code, tc.status, tc.code)
		}
	}
}

// The node's table is built on the store's: every code of the store is in
// it, in the store's order, with the same status and the store's errors,
// so an error of the store gets the same answer from either layer on the
// node's port.
func TestTable_HoldsTheStoresCodes(t *testing.T) {
	codes := table.Codes()
	last := -1
	for _, sc := range errcode.Store.Codes() {
		i := slices.IndexFunc(codes, func(c errcode.Code) bool { return c.Name == sc.Name })
		if i < 0 {
			t.Errorf("the store's code %q is not in the table", sc.Name)
			continue
		}
		if i < last {
			t.Errorf("the store's code %q is out of the store's order", sc.Name)
		}
		last = i
		if got, want := codes[i].Status, sc.Status; got != want {
			t.Errorf("%s: status %d, the store's %d", sc.Name, got, want)
		}
		for _, e := range sc.Errs {
			if !slices.Contains(codes[i].Errs, e) {
				t.Errorf("%s: %v is not among its errors", sc.Name, e)
			}
			ws, wc := StatusOf(e)
			ss, scode := errcode.Store.StatusOf(e)
			if ws != ss || wc != scode {
				t.Errorf("%v: wire answers %d %q, the store %d %q", e, ws, wc, ss, scode)
			}
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
				var ua *errcode.UnexpectedAnswer
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
	var re *errcode.RemoteError
	if !errors.As(err, &re) || re.Code != "overlap_forbidden" || errors.Unwrap(err) != nil {
		t.Errorf("unknown code: %#v, want a RemoteError standing for nothing", err)
	}
}

// A store error and a scheduler error, answered on one port, come back as
// the same RemoteError type, each standing for its own sentinel: the
// store's read by the store's client, the scheduler's by wire.
func TestRemoteError_StoreAndSchedulerRoundTrip(t *testing.T) {
	store := bolt.New(filepath.Join(t.TempDir(), "store.db"))
	if err := store.Open(); err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	mux := http.NewServeMux()
	mux.Handle(httpstore.PathPrefix, &httpstore.Handler{Store: store, Logger: slog.New(slog.DiscardHandler)})
	mux.HandleFunc("POST /api/v1/jobs/report/trigger", func(w http.ResponseWriter, r *http.Request) {
		err := fmt.Errorf("trigger report: %w", jobs.ErrNotLeader)
		status, _ := StatusOf(err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(Body(err))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	_, storeErr := httpstore.NewClient(srv.URL, nil).Get(context.Background(), "reports/missing.csv")
	resp, err := srv.Client().Post(srv.URL+"/api/v1/jobs/report/trigger", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, apiErr := ReadAnswer(resp)

	for _, tc := range []struct {
		name   string
		err    error
		want   error
		status int
		code   string
	}{
		{"store", storeErr, fencedstore.ErrNotFound, http.StatusNotFound, "not_found"},
		{"scheduler", apiErr, jobs.ErrNotLeader, http.StatusServiceUnavailable, "not_leader"},
	} {
		var re *errcode.RemoteError
		if !errors.As(tc.err, &re) || re.Status != tc.status || re.Code != tc.code {
			t.Errorf("%s: err = %#v, want an *errcode.RemoteError %d %q", tc.name, tc.err, tc.status, tc.code)
		}
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: err = %v, want it to be %v", tc.name, tc.err, tc.want)
		}
	}
}
