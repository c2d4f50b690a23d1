package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestHealth_ExitStatus(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			w.Write([]byte("ok\n"))
		case r.URL.Path == "/readyz" && ready.Load():
			w.Write([]byte("ready: leader n1, epoch 2\n"))
		case r.URL.Path == "/readyz":
			http.Error(w, "not ready: no leader with a committed epoch yet", http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		name    string
		ready   bool
		args    []string
		code    int
		outputs string
	}{
		{"not ready", false, nil, 1, "no leader"},
		{"alive though not ready", false, []string{"-live"}, 0, "ok"},
		{"ready", true, nil, 0, "leader n1"},
		{"nobody listens", true, []string{"-addr", "127.0.0.1:1"}, 1, "no fencecron node answers at 127.0.0.1:1: is one running? set -addr or FENCECRON_ADDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready.Store(tc.ready)
			var out bytes.Buffer
			err := run(context.Background(), append([]string{"health", "-addr", addr}, tc.args...), &out, &out)
			code := 0
			var ec exitCode
			if errors.As(err, &ec) {
				code = int(ec)
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || !strings.Contains(out.String(), tc.outputs) {
				t.Errorf("exit %d, output %q; want exit %d and %q", code, out.String(), tc.code, tc.outputs)
			}
		})
	}
}

// With api.tls a node's certificate names its public host: -insecure
// checks it over loopback anyway; without it the check fails.
func TestHealth_Insecure(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ready: leader n1, epoch 2\n"))
	}))
	defer srv.Close()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"health", "-addr", srv.URL, "-insecure"}, &out, &out); err != nil {
		t.Errorf("-insecure: %v\n%s", err, out.String())
	}
	out.Reset()
	var ec exitCode
	if err := run(context.Background(), []string{"health", "-addr", srv.URL}, &out, &out); !errors.As(err, &ec) || ec != 1 {
		t.Errorf("without -insecure: %v; want exit 1 (unknown authority)\n%s", err, out.String())
	}
}
