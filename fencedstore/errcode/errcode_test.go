package errcode_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/errcode"
)

// Every error of the store's table survives the trip, whatever wrapped it.
func TestStore_RoundTrip(t *testing.T) {
	for _, c := range errcode.Store.Codes() {
		for _, e := range c.Errs {
			t.Run(c.Name+"/"+e.Error(), func(t *testing.T) {
				err := fmt.Errorf("publish reports/a.csv: %w", e)
				status, code := errcode.Store.StatusOf(err)
				if status != c.Status || code != c.Name {
					t.Fatalf("StatusOf(%v) = %d %q, want %d %q", err, status, code, c.Status, c.Name)
				}
				body, _ := json.Marshal(errcode.Store.Body(err))
				got := errcode.Store.Decode(status, "application/json", body)
				var re *errcode.RemoteError
				if !errors.As(got, &re) || re.Code != code || re.Message != err.Error() || !errors.Is(got, c.Errs[0]) {
					t.Fatalf("Decode = %#v, want a RemoteError %q standing for %v", got, code, c.Errs[0])
				}
			})
		}
	}
}

// A narrower error keeps its own code, and is read as the broader one.
func TestStore_Narrower(t *testing.T) {
	for _, tc := range []struct {
		err, wider error
		code       string
	}{
		{errcode.ErrWritesDisabled, fencedstore.ErrUnauthorized, "writes_disabled"},
		{errcode.ErrBusy, fencedstore.ErrUnavailable, "busy"},
	} {
		if _, code := errcode.Store.StatusOf(tc.err); code != tc.code {
			t.Errorf("StatusOf(%v) = %q, want %q", tc.err, code, tc.code)
		}
		if !errors.Is(tc.err, tc.wider) {
			t.Errorf("%v is not %v", tc.err, tc.wider)
		}
		if _, code := errcode.Store.StatusOf(tc.wider); code == tc.code {
			t.Errorf("StatusOf(%v) = %q: the broader error took the narrower's code", tc.wider, code)
		}
	}
}

// With puts the added errors first: a decoded code stands for them, and
// the code's own errors still answer with it.
func TestCode_With(t *testing.T) {
	errJob := errors.New("no such job")
	table := errcode.New(errcode.NotFound.With(errJob))
	for _, e := range []error{errJob, fencedstore.ErrNotFound} {
		if status, code := table.StatusOf(e); status != 404 || code != "not_found" {
			t.Errorf("StatusOf(%v) = %d %q, want 404 not_found", e, status, code)
		}
	}
	if got := table.Decode(404, "application/json", []byte(`{"error":"x","code":"not_found"}`)); !errors.Is(got, errJob) {
		t.Errorf("Decode = %v, want it to stand for %v", got, errJob)
	}
	if got, want := len(errcode.NotFound.Errs), 1; got != want {
		t.Errorf("With changed the store's code: %d errors, want %d", got, want)
	}
}
