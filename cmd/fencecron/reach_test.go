package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// clearClientEnv keeps the caller's shell out of a test of the client
// flags.
func clearClientEnv(t *testing.T) {
	for _, k := range []string{"FENCECRON_ADDR", "FENCECRON_CA", "FENCECRON_INSECURE", "FENCECRON_STORE", "FENCECRON_STORE_CA", "FENCECRON_API_TOKEN", "FENCECRON_TOKEN"} {
		t.Setenv(k, "")
	}
}

// A command that finds no node says so and names how to point it at one,
// not "connection refused".
func TestClient_NoNodeNamesTheNextStep(t *testing.T) {
	clearClientEnv(t)
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"status", "-addr", "127.0.0.1:1"}, "", "no fencecron node answers at 127.0.0.1:1: is one running? set -addr or FENCECRON_ADDR"},
		{[]string{"runs"}, "127.0.0.1:1", "no fencecron node answers at 127.0.0.1:1: is one running? set -addr or FENCECRON_ADDR"},
		{[]string{"trigger", "report"}, "127.0.0.1:1", "no fencecron node answers at 127.0.0.1:1: is one running? set -addr or FENCECRON_ADDR"},
		{[]string{"get", "reports/x.csv"}, "127.0.0.1:1", "no fencecron node answers at 127.0.0.1:1: is one running? set -store or FENCECRON_STORE"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv("FENCECRON_ADDR", tc.env)
			var out, errOut bytes.Buffer
			err := run(context.Background(), tc.args, &out, &errOut)
			if err == nil || !strings.HasSuffix(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to end with %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "dial tcp") {
				t.Errorf("err = %v: the transport's words instead of the next step", err)
			}
		})
	}
}

// tlsStore is a store served over TLS by a certificate of a private CA,
// whose PEM file it returns.
func tlsStore(t *testing.T) (url, caFile string) {
	t.Helper()
	sg, err := fencedstore.NewSigner([]byte("cmd-test-cluster-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	s := bolt.New(filepath.Join(t.TempDir(), "store.db"))
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(context.Background(), fencedstore.PublishRequest{Key: "reports/r.csv", Body: []byte("a,b\n"), Token: fencedstore.Token{Epoch: 1, Seq: 1}}); err != nil {
		t.Fatal(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(wire.Status{Node: "n1", Leader: "n1", Epoch: 2, RaftState: "Leader"})
	})
	store := &httpstore.Handler{Store: s, Signer: sg, Logger: slog.New(slog.DiscardHandler)}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/status" {
			api.ServeHTTP(w, r)
			return
		}
		store.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); s.Close() })
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL, caFile
}

// Every command that talks to a node trusts a private CA the same way:
// -ca, FENCECRON_CA, or -insecure (FENCECRON_INSECURE); without them the
// error names -ca and FENCECRON_CA.
func TestClient_PrivateCA(t *testing.T) {
	url, caFile := tlsStore(t)
	for _, cmd := range [][]string{{"get", "-store", url, "reports/r.csv"}, {"status", "-addr", url}} {
		name := cmd[0]
		for _, tc := range []struct {
			how  string
			args []string
			env  map[string]string
			ok   bool
		}{
			{"no CA", nil, nil, false},
			{"-ca", []string{"-ca", caFile}, nil, true},
			{"FENCECRON_CA", nil, map[string]string{"FENCECRON_CA": caFile}, true},
			{"-insecure", []string{"-insecure"}, nil, true},
			{"FENCECRON_INSECURE", nil, map[string]string{"FENCECRON_INSECURE": "true"}, true},
		} {
			t.Run(name+" "+tc.how, func(t *testing.T) {
				clearClientEnv(t)
				for k, v := range tc.env {
					t.Setenv(k, v)
				}
				args := append([]string{cmd[0]}, tc.args...)
				args = append(args, cmd[1:]...)
				var out, errOut bytes.Buffer
				err := run(context.Background(), args, &out, &errOut)
				if tc.ok {
					if err != nil {
						t.Fatalf("fencecron %v: %v\n%s", args, err, errOut.String())
					}
					if want := map[string]string{"get": "a,b\n", "status": "leader n1; epoch 2"}[name]; !strings.Contains(out.String(), want) {
						t.Errorf("fencecron %v printed %q, want %q", args, out.String(), want)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), "signed by an authority this command does not trust") || !strings.Contains(err.Error(), "-ca FILE or FENCECRON_CA") {
					t.Errorf("fencecron %v: %v; want the next step: -ca FILE or FENCECRON_CA", args, err)
				}
			})
		}
	}
}

// https:// to a node that serves plain HTTP says so.
func TestClient_HTTPSToPlainNode(t *testing.T) {
	clearClientEnv(t)
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"status", "-addr", "https://" + host}, &out, &errOut)
	if want := host + " answers plain HTTP, not HTTPS: use http:// in -addr (or FENCECRON_ADDR)"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}
