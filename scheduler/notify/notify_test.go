package notify

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// target is a loopback HTTP target that answers status and keeps what
// it got.
type target struct {
	mu     sync.Mutex
	status int
	bodies []string
}

func (h *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bodies = append(h.bodies, string(b))
	w.WriteHeader(h.status)
}

func (h *target) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.bodies...)
}

// failNotice records a failed run of job in lg: one notice is then
// pending.
func failNotice(t *testing.T, lg *testLog, job string) {
	t.Helper()
	res := lg.mustApply(t, grant(job, t0))
	lg.mustApply(t, complete(res.Run.Attempts[0].ID, jobs.Failed, 7))
	if n := len(lg.fsm.Notices()); n != 1 {
		t.Fatalf("%d notices pending, want 1", n)
	}
}

// A Slack target gets Slack's incoming-webhook message, and the delivery
// is recorded: the notice leaves the state and is not sent again.
func TestSender_SlackDeliveredOnce(t *testing.T) {
	h := &target{status: http.StatusOK}
	srv := httptest.NewServer(h)
	defer srv.Close()
	lg := newTestLog(t, jobs.Spec{Name: "j", Schedules: []string{"@daily"}, Shell: "false",
		Notify: []jobs.Notify{{On: []string{"failed"}, Slack: srv.URL + "/services/T/B/X"}}})
	sm := lg.fsm
	failNotice(t, lg, "j")
	runSender(t, lg, Config{DashboardURL: "http://127.0.0.1:8080"})
	waitFor(t, "the delivery recorded", func() error {
		if n := len(sm.Notices()); n != 0 {
			return fmt.Errorf("%d pending", n)
		}
		return nil
	})
	bodies := h.got()
	if len(bodies) != 1 {
		t.Fatalf("slack got %d messages, want 1", len(bodies))
	}
	var msg struct {
		Text   string           `json:"text"`
		Blocks []map[string]any `json:"blocks"`
	}
	if err := json.Unmarshal([]byte(bodies[0]), &msg); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"job j failed", "exit code 7", "http://127.0.0.1:8080/jobs/j#run-"} {
		if !strings.Contains(msg.Text, want) {
			t.Errorf("text %q lacks %q", msg.Text, want)
		}
	}
	if len(msg.Blocks) != 1 || msg.Blocks[0]["type"] != "section" {
		t.Errorf("blocks = %v", msg.Blocks)
	}
	if n := sm.Counters()[fsm.CounterNotified]; n != 1 {
		t.Errorf("notified = %d, want 1", n)
	}
}

// A target that keeps refusing is tried MaxTries times with backoff,
// then given up, and that is recorded as notify_failed; scheduling goes
// on meanwhile.
func TestSender_GivesUpAfterMaxTries(t *testing.T) {
	h := &target{status: http.StatusServiceUnavailable}
	srv := httptest.NewServer(h)
	defer srv.Close()
	lg := newTestLog(t, jobs.Spec{Name: "j", Schedules: []string{"@daily"}, Shell: "false",
		Notify: []jobs.Notify{{On: []string{"failed"}, Webhook: srv.URL}}})
	sm := lg.fsm
	failNotice(t, lg, "j")
	runSender(t, lg, Config{MaxTries: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	waitFor(t, "given up", func() error {
		if n := sm.Counters()[fsm.CounterNotifyFailed]; n != 1 {
			return fmt.Errorf("notify_failed = %d", n)
		}
		return nil
	})
	if n := len(h.got()); n != 3 {
		t.Errorf("target tried %d times, want 3", n)
	}
	if n := len(sm.Notices()); n != 0 {
		t.Errorf("%d notices still pending", n)
	}
	evs := sm.Events(0, 0)
	last := evs[len(evs)-1]
	if last.Kind != jobs.EventNotifyFailed || !strings.Contains(last.Detail, "503") || !strings.Contains(last.Detail, "3 tries") {
		t.Errorf("last event = %s %q", last.Kind, last.Detail)
	}
	// The target's path never shows in what is recorded (a Slack URL's
	// path is its secret).
	if strings.Contains(last.Detail, srv.URL+"/") {
		t.Errorf("event detail shows the target's path: %q", last.Detail)
	}
}

// A target that cannot be reached is reported by scheme and host only:
// a Slack URL's path is its secret.
func TestSender_ErrorsHideTheTargetPath(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there now
	n := New(Config{}, nil, nil, nil, nil)
	err := n.deliver(t.Context(), replicated.Notice{Run: "j@1", Target: jobs.Notify{Slack: addr + "/services/T0/B0/SECRET"}})
	if err == nil {
		t.Fatal("delivered to a closed port")
	}
	if strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), addr) {
		t.Errorf("error %q: want the host, not the path", err)
	}
}

// fakeSMTP is a minimal SMTP server for one conversation at a time: it
// offers STARTTLS when tlsConf is set, and records the commands it got
// in clear and after the upgrade.
type fakeSMTP struct {
	ln      net.Listener
	tlsConf *tls.Config
	mu      sync.Mutex
	clear   []string
	secure  []string
	data    string
}

func (s *fakeSMTP) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.converse(c)
	}
}

func (s *fakeSMTP) converse(c net.Conn) {
	defer func() { c.Close() }()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tp := textproto.NewConn(c)
	secure := false
	tp.PrintfLine("220 fake ESMTP")
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		cmd, _, _ := strings.Cut(strings.ToUpper(line), " ")
		s.mu.Lock()
		if secure {
			s.secure = append(s.secure, cmd)
		} else {
			s.clear = append(s.clear, cmd)
		}
		s.mu.Unlock()
		switch cmd {
		case "EHLO":
			if s.tlsConf != nil && !secure {
				tp.PrintfLine("250-fake\r\n250 STARTTLS")
			} else {
				tp.PrintfLine("250 fake")
			}
		case "STARTTLS":
			tp.PrintfLine("220 go ahead")
			tc := tls.Server(c, s.tlsConf)
			if err := tc.Handshake(); err != nil {
				return
			}
			c, tp, secure = tc, textproto.NewConn(tc), true
		case "DATA":
			tp.PrintfLine("354 go on")
			b, err := tp.ReadDotBytes()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.data = string(b)
			s.mu.Unlock()
			tp.PrintfLine("250 queued")
		case "QUIT":
			tp.PrintfLine("221 bye")
			return
		default:
			tp.PrintfLine("250 ok")
		}
	}
}

// With starttls, the mail goes only after the upgrade (nothing but EHLO
// and STARTTLS in clear), with the server's certificate verified; a
// server that does not offer STARTTLS is refused before anything is sent.
func TestSender_MailStartTLS(t *testing.T) {
	tsrv := httptest.NewTLSServer(http.NotFoundHandler()) // for its certificate
	cert := tsrv.TLS.Certificates[0]
	pool := x509.NewCertPool()
	pool.AddCert(tsrv.Certificate())
	tsrv.Close()
	notice := replicated.Notice{ID: 1, Index: 9, Job: "j", Run: "j@1", State: "failed", Target: jobs.Notify{Email: []string{"ops@example.test"}}}
	for _, tc := range []struct {
		name    string
		offer   bool
		wantErr string
	}{{"upgrades first", true, ""}, {"refuses a server without STARTTLS", false, "does not offer it"}} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			s := &fakeSMTP{ln: ln}
			if tc.offer {
				s.tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}}
			}
			done := make(chan struct{})
			go func() { defer close(done); s.serve() }()
			defer func() { ln.Close(); <-done }()
			port := ln.Addr().(*net.TCPAddr).Port
			n := New(Config{SMTP: SMTPConfig{Host: "127.0.0.1", Port: port, From: "fencecron@example.test", StartTLS: true, RootCAs: pool}}, nil, nil, nil, nil)
			err = n.deliver(t.Context(), notice)
			s.mu.Lock()
			defer s.mu.Unlock()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("deliver = %v, want %q", err, tc.wantErr)
				}
				if slices.Contains(s.clear, "MAIL") || s.data != "" {
					t.Errorf("sent in clear: %v", s.clear)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(s.clear, " "); got != "EHLO STARTTLS" {
				t.Errorf("in clear: %s, want EHLO STARTTLS", got)
			}
			if !slices.Contains(s.secure, "MAIL") || !strings.Contains(s.data, "Message-ID: <j.1.9.1@example.test>") {
				t.Errorf("after the upgrade: %v, message:\n%s", s.secure, s.data)
			}
		})
	}
}
