package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
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

func TestTokenText_SignsScopeAndAttempt(t *testing.T) {
	sg, _ := fencedstore.NewSigner([]byte("cmd-test-cluster-secret-0123456789"))
	hook := tokenText(sg, slog.New(slog.DiscardHandler))
	granted := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	a := scheduler.Assignment{
		Run:     jobs.Run{ID: "report@x", Job: "report", Output: "reports/2026-07.csv"},
		Attempt: jobs.Attempt{ID: "report@x.2", Token: jobs.Fence{Epoch: 4, Seq: 77}, GrantedAt: granted},
		Spec:    jobs.Spec{Name: "report", Output: `reports/{{ .Scheduled.Format "2006-01" }}.csv`, Timeout: jobs.Duration(10 * time.Minute), LeaseTTL: jobs.Duration(30 * time.Second)},
	}
	st, err := sg.Verify(hook(a))
	if err != nil {
		t.Fatal(err)
	}
	// Granted + timeout + lease TTL + the margin: the one expiry the
	// worker's own store calls carry too.
	expires := granted.Add(10*time.Minute + 30*time.Second + jobs.TokenExpiryMargin)
	if !a.TokenExpires().Equal(expires) {
		t.Errorf("Assignment.TokenExpires = %v, want %v", a.TokenExpires(), expires)
	}
	want := fencedstore.SignedToken{Token: fencedstore.Token{Epoch: 4, Seq: 77}, Attempt: "report@x.2", Scope: fencedstore.Scope{Job: "report", Prefix: "reports/"}, Expires: expires}
	if st != want {
		t.Errorf("token = %+v, want %+v", st, want)
	}
	if !st.Scope.Covers(a.Run.Output) {
		t.Errorf("the token does not cover its own output %s", a.Run.Output)
	}
	a.Spec.Output, a.Run.Output = "", ""
	if st, _ := sg.Verify(hook(a)); st.Scope.Prefix != "report/" {
		t.Errorf("scope of a job without output = %q, want report/", st.Scope.Prefix)
	}
	// A template with no literal directory: the job's own directory, not
	// the whole store.
	a.Spec.Output, a.Run.Output = "{{ .Job }}-{{ .RunID }}.txt", "report-report@x.txt"
	if st, err := sg.Verify(hook(a)); err != nil || st.Scope.Prefix != "report/" || st.Scope.Covers("other/report.csv") {
		t.Errorf("scope of a job whose output has no literal directory = %+v, %v; want report/", st.Scope, err)
	}
}

// The real binary: a dev node generates its secret (0600) and serves the
// store's write endpoint, and `fencecron publish`/`get` work against it
// with only a signed token, as a job would.
func TestDev_PublishWithSignedToken(t *testing.T) {
	dataDir := t.TempDir()
	httpPort := proctest.FreePort(t)
	dev := startDev(t, dataDir, httpPort, proctest.FreePort(t), proctest.FreePort(t))
	dev.waitSucceeded(t, jobs.Fence{})

	path := filepath.Join(dataDir, secretFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	raw, _ := os.ReadFile(path)
	secret, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	sg, err := fencedstore.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}

	addr := "127.0.0.1:" + strconv.Itoa(httpPort)
	fencecron := func(token string, stdin string, args ...string) (string, int) {
		cmd := exec.Command(proctest.Binary(t), args...)
		cmd.Env = append(os.Environ(), "FENCECRON_STORE="+addr, "FENCECRON_TOKEN="+token)
		cmd.Stdin = strings.NewReader(stdin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("fencecron %v did not finish in 30s", args)
		}
		return out.String(), cmd.ProcessState.ExitCode()
	}
	tok := mustSign(t, sg, 1<<40, 1, "manual/")
	if out, code := fencecron(tok, "hello\n", "publish", "manual/hello.txt"); code != 0 || !strings.Contains(out, "applied manual/hello.txt version=1") {
		t.Fatalf("publish: exit %d: %s", code, out)
	}
	if out, code := fencecron("", "", "get", "manual/hello.txt"); code != 0 || out != "hello\n" {
		t.Fatalf("get: exit %d: %q", code, out)
	}
	if out, code := fencecron(mustSign(t, sg, 1, 1, "manual/"), "old\n", "publish", "manual/hello.txt"); code != exitStaleOwner {
		t.Fatalf("stale publish: exit %d, want %d: %s", code, exitStaleOwner, out)
	}
	forged := strings.Replace(tok, fmt.Sprintf("v2.%d.", uint64(1<<40)), "v2.9999999999999.", 1)
	if out, code := fencecron(forged, "x", "publish", "manual/hello.txt"); code != exitError || !strings.Contains(out, "signature does not match") {
		t.Fatalf("forged publish: exit %d, want 1 with a clear message: %s", code, out)
	}
	if out, code := fencecron(tok, "x", "publish", "reports/evil.csv"); code != exitError || !strings.Contains(out, "outside the scope") {
		t.Fatalf("out-of-scope publish: exit %d: %s", code, out)
	}
}
