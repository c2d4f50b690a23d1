package httpstore_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/errcode"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
)

// The client reads an error answer by the store's table and takes what
// comes: a code the table names is the error it stands for, a code that
// says the request was wrong, or none at all, is the store's words, and
// anything a 5xx is ErrUnavailable.
func TestClient_ReadsErrorAnswers(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      int
		contentType string
		body        string
		want        error  // nil: no sentinel
		code        string // "": not a RemoteError
		msg         string
	}{
		{"writes disabled", 403, "application/json", `{"error":"writes disabled: not the store node","code":"writes_disabled"}`,
			fencedstore.ErrUnauthorized, "writes_disabled", "writes disabled: not the store node"},
		{"busy", 503, "application/json", `{"error":"publish k: busy","code":"busy"}`,
			fencedstore.ErrUnavailable, "busy", "publish k: busy"},
		{"quota", 507, "application/json", `{"error":"quota exceeded: 3 keys","code":"quota"}`,
			fencedstore.ErrQuota, "quota", "quota exceeded: 3 keys"},
		{"bad request", 400, "application/json", `{"error":"bad request: version \"0\"","code":"bad_request"}`,
			nil, "", `store answered 400 Bad Request: bad request: version "0"`},
		{"unknown code", 409, "application/json", `{"error":"x","code":"overlap_forbidden"}`,
			nil, "", "store answered 409 Conflict: x"},
		{"a proxy's page", 502, "text/html", "<html>bad gateway</html>",
			fencedstore.ErrUnavailable, "", "<html>bad gateway</html>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			_, err := httpstore.NewClient(srv.URL, nil).Get(context.Background(), "k")
			if err == nil || err.Error() != tc.msg {
				t.Fatalf("err = %v, want %q", err, tc.msg)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want it to be %v", err, tc.want)
			}
			var re *errcode.RemoteError
			switch isRemote := errors.As(err, &re); {
			case tc.want == nil && isRemote:
				t.Errorf("err = %#v, want the store's words, standing for nothing", err)
			case tc.code != "" && (!isRemote || re.Code != tc.code || re.Status != tc.status):
				t.Errorf("err = %#v, want a RemoteError %d %q", err, tc.status, tc.code)
			}
		})
	}
}
