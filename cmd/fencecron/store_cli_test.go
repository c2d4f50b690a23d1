package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
)

// storeServer serves a bolt store with the cluster secret sg verifies.
func storeServer(t *testing.T, sg *fencedstore.Signer) (*bolt.Store, string) {
	t.Helper()
	s := bolt.New(filepath.Join(t.TempDir(), "store.db"))
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&httpstore.Handler{Store: s, Signer: sg, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { srv.Close(); s.Close() })
	return s, srv.URL
}

// mustSign signs a token of job "job" that expires in an hour.
func mustSign(t *testing.T, sg *fencedstore.Signer, epoch, seq uint64, prefix string) string {
	t.Helper()
	return mustSignExpiring(t, sg, epoch, seq, prefix, time.Now().Add(time.Hour))
}

func mustSignExpiring(t *testing.T, sg *fencedstore.Signer, epoch, seq uint64, prefix string, expires time.Time) string {
	t.Helper()
	text, err := sg.Sign(fencedstore.SignedToken{Token: fencedstore.Token{Epoch: epoch, Seq: seq}, Attempt: fmt.Sprintf("job@t.%d", seq), Scope: fencedstore.Scope{Job: "job", Prefix: prefix}, Expires: expires})
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func TestPublishAndGet_ExitCodes(t *testing.T) {
	sg, err := fencedstore.NewSigner([]byte("cmd-test-cluster-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := fencedstore.NewSigner([]byte("not-this-cluster-secret-0123456789"))
	store, url := storeServer(t, sg)
	t.Setenv("FENCECRON_STORE", strings.TrimPrefix(url, "http://"))
	file := filepath.Join(t.TempDir(), "report.csv")
	if err := os.WriteFile(file, []byte("a,b\n1,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file2 := filepath.Join(t.TempDir(), "report2.csv")
	if err := os.WriteFile(file2, []byte("a,b\n3,4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	newer := mustSign(t, sg, 2, 20, "reports/")
	older := mustSign(t, sg, 1, 10, "reports/")
	expired := mustSignExpiring(t, sg, 3, 30, "reports/", time.Now().Add(-time.Minute))

	cases := []struct {
		name   string
		token  string
		args   []string
		want   int
		stdout string
		stderr string
	}{
		{"applied", newer, []string{"publish", "reports/r.csv", file}, 0, "applied reports/r.csv version=1 greatest=2.20", ""},
		{"idempotent retry", newer, []string{"publish", "reports/r.csv", file}, 0, "applied reports/r.csv version=1", ""},
		{"stale", older, []string{"publish", "reports/r.csv", file}, exitStaleOwner, "", "newer fence token"},
		{"conflict", newer, []string{"publish", "-if-match", "0", "reports/r.csv", file2}, exitConflict, "", "at version 1, not 0"},
		{"expired", expired, []string{"publish", "reports/r.csv", file2}, exitExpired, "", "token has expired"},
		{"expired on a new key", expired, []string{"publish", "reports/new.csv", file2}, exitExpired, "", "expired reports/new.csv version=0"},
		{"second output of the job", newer, []string{"publish", "reports/r-summary.csv", file}, 0, "applied reports/r-summary.csv", ""},
		{"out of scope", newer, []string{"publish", "logs/r.csv", file}, exitError, "", ""},
		{"forged", strings.Replace(newer, "v2.2.20.", "v2.99999.20.", 1), []string{"publish", "reports/r.csv", file}, exitError, "", ""},
		{"other cluster", mustSign(t, other, 9, 9, "reports/"), []string{"publish", "reports/r.csv", file}, exitError, "", ""},
		{"no token", "", []string{"publish", "reports/r.csv", file}, exitError, "", ""},
		{"bad key", newer, []string{"publish", "reports/../etc", file}, exitError, "", ""},
		{"no key", newer, []string{"publish"}, exitUsage, "", "Usage"},
		{"missing file", newer, []string{"publish", "reports/r.csv", file + ".nope"}, exitError, "", ""},
		{"get", "", []string{"get", "reports/r.csv"}, 0, "a,b\n1,2\n", ""},
		{"get missing", "", []string{"get", "reports/none.csv"}, exitNotFound, "", "no such key"},
		{"get bad key", "", []string{"get", "/etc/passwd"}, exitError, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FENCECRON_TOKEN", tc.token)
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, &stdout, &stderr)
			if got := exitCodeOf(err); got != tc.want {
				t.Fatalf("exit %d (%v), want %d; stderr:\n%s", got, err, tc.want, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.stdout) {
				t.Errorf("stdout %q, want it to contain %q", stdout.String(), tc.stdout)
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tc.stderr)
			}
		})
	}
	h, err := store.History(context.Background(), "reports/r.csv")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range h {
		got = append(got, string(d.Outcome))
	}
	if want := "applied applied stale_owner conflict expired"; strings.Join(got, " ") != want {
		t.Errorf("history of reports/r.csv = %v, want %s (refused requests leave no trace)", got, want)
	}
}

func TestLoadOrCreateSecret(t *testing.T) {
	dir := t.TempDir()
	a, err := loadOrCreateSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, secretFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("secret file mode %v, want 0600", fi.Mode().Perm())
	}
	b, err := loadOrCreateSecret(dir)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("second load = %x, %v; want the same secret %x", b, err, a)
	}
	if len(a) != 32 {
		t.Errorf("secret is %d bytes, want 32", len(a))
	}
	os.Chmod(filepath.Join(dir, secretFile), 0o644)
	if _, err := loadOrCreateSecret(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable secret: err = %v, want a chmod hint", err)
	}
	os.WriteFile(filepath.Join(dir, secretFile), []byte("zz"), 0o600)
	if _, err := loadOrCreateSecret(dir); err == nil {
		t.Error("a corrupt secret file was accepted")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left temporary files: %v", entries)
	}
}

// A job's token never leaves the host over plain HTTP, even when a user
// points publish at another host's http:// address: the client refuses
// before it connects.
func TestPublish_RefusesTokenInTheClear(t *testing.T) {
	t.Setenv("FENCECRON_TOKEN", "v2.1.1.1.YQ.ag~cmVwb3J0cy8.AAAA")
	t.Setenv("FENCECRON_STORE_CA", "")
	var stdout, stderr bytes.Buffer
	start := time.Now()
	err := run(t.Context(), []string{"publish", "-store", "http://192.0.2.10:8080", "reports/x.csv", "/dev/null"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "refusing to send the fence token in the clear") {
		t.Fatalf("publish over plain HTTP to another host: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %s: it tried to connect", d)
	}
	for _, u := range []string{"http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080"} {
		if !isLoopbackURL(u) {
			t.Errorf("%s counted as another host", u)
		}
	}
	if isLoopbackURL("http://192.0.2.10:8080") || isLoopbackURL("http://localhost.attacker.example") {
		t.Error("another host counted as this one")
	}
}
