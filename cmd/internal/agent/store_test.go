package agent

import (
	"log/slog"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/worker"
)

func TestTokenText_SignsScopeAndAttempt(t *testing.T) {
	sg, _ := fencedstore.NewSigner([]byte("cmd-test-cluster-secret-0123456789"))
	hook := TokenText(sg, slog.New(slog.DiscardHandler))
	granted := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	a := worker.Assignment{
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
