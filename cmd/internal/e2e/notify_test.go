package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/notify"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// smtpServer is a real SMTP server (OpenSMTPD, from Debian's opensmtpd,
// which .ci/run installs) on a loopback port, delivering every message
// to one Maildir.
type smtpServer struct {
	t        *testing.T
	bin      string
	Port     int
	dir      string
	conf     string
	proc     *exec.Cmd
	exited   chan struct{}
	maildir  string
	logPath  string
	stopOnce sync.Once
}

// startSMTP starts OpenSMTPD, or fails the test under CI=true when it is
// not there, and skips it elsewhere.
func startSMTP(t *testing.T) *smtpServer {
	t.Helper()
	bin, err := exec.LookPath("smtpd")
	if err != nil {
		// Debian puts it in /usr/sbin, which a PATH may leave out.
		if _, serr := os.Stat("/usr/sbin/smtpd"); serr == nil {
			bin, err = "/usr/sbin/smtpd", nil
		}
	}
	if err == nil && os.Geteuid() != 0 {
		err = fmt.Errorf("smtpd must start as root (it drops privileges itself)")
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("OpenSMTPD is needed and missing (.ci/run installs opensmtpd): %v", err)
		}
		t.Skipf("needs OpenSMTPD's smtpd, run as root: apt-get install opensmtpd, then run this test as root (%v)", err)
	}
	// Its delivery runs as nobody: the Maildir must be reachable by it,
	// which a test's own temp dir (0700) is not.
	dir, err := os.MkdirTemp("", "fencecron-smtp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	maildir := filepath.Join(dir, "Maildir")
	for _, d := range []string{dir, maildir} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o777)
	}
	s := &smtpServer{t: t, bin: bin, Port: proctest.FreePort(t), dir: dir, maildir: maildir, logPath: filepath.Join(dir, "smtpd.log")}
	s.conf = filepath.Join(dir, "smtpd.conf")
	conf := fmt.Sprintf(`table vusers { "@" = "nobody" }
listen on 127.0.0.1 port %d
action "deliver" maildir "%s" virtual <vusers>
match from any for any action "deliver"
`, s.Port, maildir)
	if err := os.WriteFile(s.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	s.start()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			b, _ := os.ReadFile(s.logPath)
			t.Logf("--- smtpd log ---\n%s", b)
		}
	})
	return s
}

func (s *smtpServer) start() {
	s.t.Helper()
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(s.bin, "-d", "-f", s.conf)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		s.t.Fatal(err)
	}
	s.proc, s.exited, s.stopOnce = cmd, make(chan struct{}), sync.Once{}
	exited := s.exited
	go func() { cmd.Wait(); log.Close(); close(exited) }()
	proctest.Eventually(s.t, 20*time.Second, "smtpd listens", func() error {
		select {
		case <-exited:
			b, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("smtpd exited: %s", b)
		default:
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.Port), time.Second)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
}

// stop ends smtpd (its whole process group: it forks its own processes)
// and waits for it.
func (s *smtpServer) stop() {
	s.stopOnce.Do(func() {
		syscall.Kill(-s.proc.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-s.proc.Process.Pid, syscall.SIGKILL)
			<-s.exited
		}
	})
}

var notificationIDHeader = regexp.MustCompile(`(?m)^Fencecron-Notification-Id: (\S+)\r?$`)

// mails returns the delivered messages' notification ids, by run.
func (s *smtpServer) mails() (map[string][]string, error) {
	out := map[string][]string{}
	files, err := filepath.Glob(filepath.Join(s.maildir, "new", "*"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		m := notificationIDHeader.FindSubmatch(b)
		if m == nil {
			return nil, fmt.Errorf("%s has no Fencecron-Notification-Id:\n%s", f, b)
		}
		id := string(m[1])
		run := id[:strings.Index(id, "/")]
		out[run] = append(out[run], id)
	}
	return out, nil
}

// hookReceiver is a webhook target on loopback that counts what it
// accepted, by run, and can refuse for a while.
type hookReceiver struct {
	mu       sync.Mutex
	refuse   bool
	refused  map[string]int
	accepted map[string][]notify.WebhookPayload
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var p notify.WebhookPayload
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err := json.Unmarshal(b, &p); err != nil || p.Run == "" || r.Header.Get("Fencecron-Notification-Id") != p.ID {
		http.Error(w, "bad notification", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refuse {
		h.refused[p.Run]++
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	h.accepted[p.Run] = append(h.accepted[p.Run], p)
}

func (h *hookReceiver) setRefuse(v bool) { h.mu.Lock(); h.refuse = v; h.mu.Unlock() }

func (h *hookReceiver) counts(run string) (accepted []notify.WebhookPayload, refused int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]notify.WebhookPayload(nil), h.accepted[run]...), h.refused[run]
}

// A job that fails notifies a webhook and an email address, exactly
// once each per failure, on a three-server cluster whose leader is
// SIGKILLed: right after it delivered (the new leader does not send
// again), and right after the failure while the targets were refusing
// (the new leader sends what the dead one could not).
func TestNotify_OncePerFailureAcrossLeaderKills(t *testing.T) {
	t.Parallel()
	smtp := startSMTP(t)
	hooks := &hookReceiver{refused: map[string]int{}, accepted: map[string][]notify.WebhookPayload{}}
	srv := httptest.NewServer(hooks)
	defer srv.Close()

	c := startCluster(t, localcluster.Options{Servers: 3, StoreNode: true,
		Sections: fmt.Sprintf("notify:\n  host: 127.0.0.1\n  port: %d\n  from: fencecron@localhost\n", smtp.Port),
		Jobs: fmt.Sprintf(`  - name: boom
    schedule: "@yearly"
    shell: 'echo "it broke" >&2; exit 3'
    lease_ttl: 5s
    timeout: 20s
    notify:
      - {on: [failed], webhook: %q}
      - {on: [failed], email: [ops@example.test]}
`, srv.URL+"/hook")})
	agreed := agree(t, c, 60*time.Second)

	// trigger fails a run of boom and returns it once it failed.
	trigger := func(via *localcluster.Node) jobs.Run {
		t.Helper()
		var run jobs.Run
		proctest.Eventually(t, 30*time.Second, "trigger boom", func() error { return via.Post("/api/v1/jobs/boom/trigger", nil, &run) })
		proctest.Eventually(t, 30*time.Second, "boom's run fails", func() error {
			runs, err := via.Runs("boom", 20)
			if err != nil {
				return err
			}
			for _, r := range runs {
				if r.ID == run.ID && r.State == jobs.Failed {
					run = r
					return nil
				}
			}
			return fmt.Errorf("run %s not failed yet", run.ID)
		})
		return run
	}
	// delivered waits until both notices of run arrived.
	delivered := func(run jobs.Run) {
		t.Helper()
		proctest.Eventually(t, 60*time.Second, "both notices of "+run.ID+" delivered", func() error {
			hook, _ := hooks.counts(run.ID)
			mails, err := smtp.mails()
			if err != nil {
				return err
			}
			if len(hook) == 0 || len(mails[run.ID]) == 0 {
				return fmt.Errorf("webhook %d, email %d", len(hook), len(mails[run.ID]))
			}
			return nil
		})
	}
	notified := func(n *localcluster.Node) uint64 {
		var ev wire.EventList
		if err := n.GetJSON("/api/v1/events?limit=1", &ev); err != nil {
			return 0
		}
		return ev.Counters[fsm.CounterNotified]
	}
	leaderNode := func(a localcluster.Agreement) *localcluster.Node { return c.Node(a.Leader) }

	// 1. Delivered and recorded, then the leader dies: no second send.
	l1 := leaderNode(agreed)
	run1 := trigger(l1)
	delivered(run1)
	proctest.Eventually(t, 30*time.Second, "the deliveries are recorded", func() error {
		if n := notified(l1); n != 2 {
			return fmt.Errorf("notified = %d, want 2", n)
		}
		return nil
	})
	l1.Kill()
	agreed = agree(t, c, 60*time.Second)
	l2 := leaderNode(agreed)
	if l2 == l1 {
		t.Fatal("the killed leader leads again")
	}
	// A second failure under the new leader is sent, once; the first
	// is not sent again (it was recorded delivered before the kill).
	// (Once gossip says the killed node is gone, so that the run goes
	// to a live worker.)
	proctest.Eventually(t, 60*time.Second, l1.Name+" gone in gossip", func() error {
		st, err := l2.Status()
		if err != nil {
			return err
		}
		for _, m := range st.Members {
			if m.Name == l1.Name && m.State == "alive" {
				return fmt.Errorf("%s is still alive to %s", l1.Name, l2.Name)
			}
		}
		return nil
	})
	run2 := trigger(l2)
	delivered(run2)
	// The killed node comes back (the next kill needs a quorum without
	// another); it may even take the lead: whoever leads now is the one
	// to kill next.
	if err := l1.Start(); err != nil {
		t.Fatal(err)
	}
	agreed = agree(t, c, 60*time.Second)
	l2 = leaderNode(agreed)

	// 2. The targets refuse, the run fails, the leader tries, and dies
	// before any delivery: the next leader sends.
	hooks.setRefuse(true)
	smtp.stop()
	run3 := trigger(l2)
	proctest.Eventually(t, 30*time.Second, "the leader tried the webhook", func() error {
		if _, refused := hooks.counts(run3.ID); refused == 0 {
			return fmt.Errorf("no try yet")
		}
		return nil
	})
	l2.Kill()
	hooks.setRefuse(false)
	smtp.start()
	agreed = agree(t, c, 60*time.Second)
	l3 := leaderNode(agreed)
	delivered(run3)
	proctest.Eventually(t, 60*time.Second, "every delivery recorded", func() error {
		if n := notified(l3); n != 6 {
			return fmt.Errorf("notified = %d, want 6", n)
		}
		return nil
	})

	// Exactly one message per failure and target.
	mails, err := smtp.mails()
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []jobs.Run{run1, run2, run3} {
		hook, _ := hooks.counts(run.ID)
		if len(hook) != 1 || len(mails[run.ID]) != 1 {
			t.Errorf("run %s: %d webhook messages, %d emails; want exactly 1 each", run.ID, len(hook), len(mails[run.ID]))
			continue
		}
		p, a := hook[0], run.Attempts[0]
		if p.Job != "boom" || p.State != "failed" || p.ExitCode == nil || *p.ExitCode != 3 || p.Token == nil ||
			p.Token.Seq != a.Token.Seq || p.Worker != a.Worker || !p.ScheduledAt.Equal(run.ScheduledAt) ||
			!strings.Contains(p.URL, "/jobs/boom#run-") || p.Attempt != a.ID {
			t.Errorf("webhook payload of %s = %+v; attempt %+v", run.ID, p, a)
		}
	}
	var others int
	for run, ids := range mails {
		if run != run1.ID && run != run2.ID && run != run3.ID {
			others += len(ids)
		}
	}
	if others != 0 {
		t.Errorf("%d emails for runs not triggered here", others)
	}
}

// stuckReceiver is a webhook target on loopback that never answers: it
// holds each request until its client gives up or the test ends, and
// counts them.
type stuckReceiver struct {
	stop  chan struct{}
	mu    sync.Mutex
	got   int // requests received
	ended int // requests whose client gave up
}

func (h *stuckReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.got++
	h.mu.Unlock()
	select {
	case <-r.Context().Done():
		h.mu.Lock()
		h.ended++
		h.mu.Unlock()
	case <-h.stop:
	}
}

func (h *stuckReceiver) counts() (got, ended int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got, h.ended
}

// A webhook that never answers delays no other target on a real
// cluster: with more of its notices pending than the leader once had
// senders, another webhook's notice is delivered before any try of the
// stuck one has ended. The stuck target is then shown backing off on
// the leader's Overview, status and metrics, by scheme and host only,
// and the other servers' Overviews point to the leader.
func TestNotify_StuckWebhookDelaysOnlyItsOwn(t *testing.T) {
	t.Parallel()
	stuck := &stuckReceiver{stop: make(chan struct{})}
	stuckSrv := httptest.NewServer(stuck)
	defer stuckSrv.Close()
	defer close(stuck.stop) // before Close, which waits for the handlers
	hooks := &hookReceiver{refused: map[string]int{}, accepted: map[string][]notify.WebhookPayload{}}
	okSrv := httptest.NewServer(hooks)
	defer okSrv.Close()

	const stuckJobs = 5 // more than the 4 senders the leader had for all targets
	var js strings.Builder
	for i := range stuckJobs {
		fmt.Fprintf(&js, `  - name: stuck%d
    schedule: "@yearly"
    shell: 'exit 3'
    notify: [{on: [failed], webhook: %q}]
`, i, stuckSrv.URL+"/hook/SECRET-PATH?token=SECRET-QUERY")
	}
	fmt.Fprintf(&js, `  - name: ok
    schedule: "@yearly"
    shell: 'exit 3'
    notify: [{on: [failed], webhook: %q}]
`, okSrv.URL+"/hook")
	c := startCluster(t, localcluster.Options{Servers: 3, Jobs: js.String()})
	leader := c.Node(agree(t, c, 60*time.Second).Leader)

	// failed waits until run failed.
	failed := func(run jobs.Run) {
		t.Helper()
		proctest.Eventually(t, 30*time.Second, run.ID+" fails", func() error {
			runs, err := leader.Runs(run.Job, 5)
			if err != nil {
				return err
			}
			for _, r := range runs {
				if r.ID == run.ID && r.State == jobs.Failed {
					return nil
				}
			}
			return fmt.Errorf("not failed yet")
		})
	}
	trigger := func(job string) jobs.Run {
		t.Helper()
		var run jobs.Run
		proctest.Eventually(t, 30*time.Second, "trigger "+job, func() error { return leader.Post("/api/v1/jobs/"+job+"/trigger", nil, &run) })
		return run
	}
	var stuckRuns []jobs.Run
	for i := range stuckJobs {
		stuckRuns = append(stuckRuns, trigger(fmt.Sprintf("stuck%d", i)))
	}
	for _, run := range stuckRuns {
		failed(run)
	}
	proctest.Eventually(t, 30*time.Second, "the stuck webhook is tried", func() error {
		if got, _ := stuck.counts(); got == 0 {
			return fmt.Errorf("no try yet")
		}
		return nil
	})
	okRun := trigger("ok")
	proctest.Eventually(t, 30*time.Second, "the other webhook gets its notice", func() error {
		if got, _ := hooks.counts(okRun.ID); len(got) == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	// Every try of the stuck webhook was still open (a try lasts 10 s):
	// the other one did not wait for them.
	if got, ended := stuck.counts(); ended != 0 || got > 2 {
		t.Errorf("when the other webhook got its notice, the stuck one had %d tries, %d of them ended; want at most 2, none ended", got, ended)
	}

	// The stuck webhook's tries time out: it is shown backing off.
	name := stuckSrv.URL // scheme://host:port, without the path
	proctest.Eventually(t, 60*time.Second, "the leader shows the stuck webhook backing off", func() error {
		st, err := leader.Status()
		if err != nil {
			return err
		}
		if st.Notify == nil {
			return fmt.Errorf("%s's status has no notify", leader.Name)
		}
		for _, tg := range st.Notify.Targets {
			if tg.Target == name && tg.BackingOff && tg.Failures >= 1 {
				return nil
			}
		}
		return fmt.Errorf("targets %+v", st.Notify.Targets)
	})
	page, err := httpGet(leader.URL() + "/")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`data-target="%s" data-backing-off="true"`, name); !bytes.Contains(page, []byte(want)) {
		t.Errorf("the leader's Overview lacks %s", want)
	}
	metrics, err := httpGet(leader.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`fencecron_notify_target_backing_off{target=%q} 1`, name); !bytes.Contains(metrics, []byte(want)) {
		t.Errorf("the leader's /metrics lacks %s", want)
	}
	status, err := httpGet(leader.URL() + "/api/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	for what, body := range map[string][]byte{"Overview": page, "metrics": metrics, "status": status} {
		if bytes.Contains(body, []byte("SECRET")) {
			t.Errorf("the leader's %s shows the stuck webhook's path or query", what)
		}
	}
	for _, n := range c.Servers() {
		if n.Name == leader.Name {
			continue
		}
		page, err := httpGet(n.URL() + "/")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(page, []byte("notifications pending: the leader sends them and shows their targets")) {
			t.Errorf("%s's Overview does not point to the leader for the pending notifications", n.Name)
		}
	}
}
