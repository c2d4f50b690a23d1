// Package notify delivers the notifications the replicated state holds
// pending (webhook and Slack over HTTP, email over SMTP with STARTTLS)
// for one leadership term at a time, and records each outcome through
// the log as a notified entry. It owns the per-target queues, the
// backoff and the redaction of secret target URLs.
//
// It knows nothing of leadership: the leader gives a Sender what it
// needs (the state to read, a way to propose the entry, a clock, a
// logger, the Config) and runs it under the term's context.
package notify

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/smtp"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Config is how a leader sends notifications (the config's top-level
// notify: section). The zero value sends webhooks and Slack messages
// with the defaults below, and refuses email.
type Config struct {
	SMTP SMTPConfig
	// DashboardURL is the base of the links to runs, such as
	// http://127.0.0.1:8080 ("" leaves the link out).
	DashboardURL string
	// MaxTries is how often a notice is tried before it is given up
	// (default 5), and how many tries in a row a target may leave
	// unanswered before the notices waiting for it are given up (see
	// target.go); Backoff the wait after the first failure,
	// doubling up to MaxBackoff (defaults 1s and 30s); Timeout bounds one
	// try (default 10s).
	MaxTries   int
	Backoff    time.Duration
	MaxBackoff time.Duration
	Timeout    time.Duration
	// Client sends webhooks and Slack messages (default: one with
	// Timeout and no redirects followed).
	Client *http.Client
}

// SMTPConfig is the SMTP server email notifications go through.
type SMTPConfig struct {
	Host     string
	Port     int
	From     string
	Username string
	Password string
	// StartTLS upgrades the connection before anything else is sent,
	// and refuses a server that cannot.
	StartTLS bool
	// RootCAs verify the server's certificate (nil: the system's).
	RootCAs *x509.CertPool
}

// Bounds of the sender.
const (
	// maxSenders is how many notices are sent at once, over all targets.
	maxSenders = 8
	// maxPerTarget is how many notices one target is sent at once while
	// it answers; a target backing off is sent one at a time.
	maxPerTarget = 2
	// maxBackingOffSenders is how many senders the targets backing off
	// hold at most together: the others stay free for those that answer.
	maxBackingOffSenders = maxSenders / 2
	// notifyTick is how often pending notices are looked at besides
	// after every applied entry.
	notifyTick = 250 * time.Millisecond
	// maxWebhookReply bounds what is read of a target's answer.
	maxWebhookReply = 4096
	// maxGivenUpPerEntry bounds the deliveries one entry records when a
	// target's waiting notices are given up together.
	maxGivenUpPerEntry = 100
)

func (c Config) withDefaults() Config {
	if c.MaxTries <= 0 {
		c.MaxTries = 5
	}
	if c.Backoff <= 0 {
		c.Backoff = time.Second
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: c.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if c.SMTP.Port == 0 {
		c.SMTP.Port = 25
	}
	return c
}

// backoff is the wait after the nth failure in a row: Backoff, doubling
// up to MaxBackoff.
func (c Config) backoff(n int) time.Duration {
	d := c.Backoff
	for i := 1; i < n && d < c.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, c.MaxBackoff)
}

// State is what a Sender reads of the replicated state; *fsm.FSM
// implements it. Both methods are safe to call concurrently.
type State interface {
	// Notices returns the notices pending delivery, oldest first.
	Notices() []replicated.Notice
	// Subscribe returns a channel signalled, coalesced, after every
	// applied entry, and a function that ends the subscription.
	Subscribe() (<-chan struct{}, func())
}

// Proposer proposes cmd (an replicated.OpNotified entry) through the leader's
// log and returns once it is applied. An error leaves its outcome
// unknown: the notices are then sent again by the next leader.
type Proposer func(ctx context.Context, cmd replicated.Command) error

// Sender is a leader term's sender: it sends the pending notices on
// goroutines of their own (scheduling never waits for a target), retries
// each with a bounded backoff, and records each outcome through the log.
//
// Targets are kept apart (target.go): each has at most maxPerTarget
// notices in flight, and one that stops answering backs off and holds at
// most one sender, so a target that hangs delays only its own notices.
//
// A Sender serves one term: create it with New, call Run once; Targets
// is safe to call at any time, from any goroutine.
type Sender struct {
	cfg     Config
	state   State
	propose Proposer
	clock   jobs.Clock
	log     *slog.Logger

	mu       sync.Mutex
	inflight map[uint64]bool
	tries    map[uint64]int
	next     map[uint64]time.Time
	targets  map[string]*targetState // by targetKey
}

// New returns a term's sender of the notices in state, which records
// their outcomes through propose, with cfg's defaults filled in. A nil
// clock is the system's, a nil logger slog.Default().
func New(cfg Config, state State, propose Proposer, clock jobs.Clock, log *slog.Logger) *Sender {
	if clock == nil {
		clock = jobs.SystemClock{}
	}
	if log == nil {
		log = slog.Default()
	}
	return &Sender{cfg: cfg.withDefaults(), state: state, propose: propose, clock: clock, log: log,
		inflight: map[uint64]bool{}, tries: map[uint64]int{}, next: map[uint64]time.Time{}, targets: map[string]*targetState{}}
}

// Run sends the pending notices until ctx ends (the term's end), and
// returns once every send it started has ended: a send cut short by ctx
// records nothing, and the next leader sends that notice again.
func (n *Sender) Run(ctx context.Context) {
	ch, stop := n.state.Subscribe()
	defer stop()
	tick := time.NewTicker(notifyTick)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		n.pump(ctx, &wg)
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-tick.C:
		}
	}
}

// pump starts sending every pending notice that is due and not already
// being sent, oldest first, as far as its target and the senders admit.
func (n *Sender) pump(ctx context.Context, wg *sync.WaitGroup) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// Read under n.mu: a send records its delivery in the log and only
	// then lets go of the notice (inflight). Read before the lock, a
	// notice could be seen pending here and no longer in flight there,
	// and be sent twice.
	pending := n.state.Notices()
	now := n.clock.Now()
	live := make(map[uint64]bool, len(pending))
	for _, no := range pending {
		live[no.ID] = true
	}
	for id := range n.tries {
		if !live[id] && !n.inflight[id] {
			delete(n.tries, id)
			delete(n.next, id)
		}
	}
	busy, backingOff := n.busy()
	seen := n.countPending(pending)
	for _, no := range pending {
		key := n.targetKey(no)
		t := n.targets[key]
		if busy >= maxSenders {
			break
		}
		if n.inflight[no.ID] || now.Before(n.next[no.ID]) || !t.admits(now, backingOff) {
			continue
		}
		if t.backingOff() {
			backingOff++
		}
		busy++
		n.inflight[no.ID] = true
		n.tries[no.ID]++
		t.inflight++
		t.lastTry = now
		gen := t.gen
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.sendOne(ctx, no, key, gen)
		}()
	}
	n.forgetTargets(seen, now)
}

// sendOne tries a notice once, and records its delivery, or that it gave
// up, through the log: after MaxTries tries, or when its target has not
// answered MaxTries tries in a row, together with every notice waiting
// for that target.
func (n *Sender) sendOne(ctx context.Context, no replicated.Notice, key string, gen uint64) {
	tryCtx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	err := n.deliver(tryCtx, no)
	cancel()
	now := n.clock.Now()
	var msg string
	if err != nil {
		msg = n.scrub(err, no)
	}
	n.mu.Lock()
	t := n.targets[key]
	t.inflight--
	tries := n.tries[no.ID]
	var out []replicated.Delivery
	var down bool
	var downMsg string
	switch {
	case ctx.Err() != nil:
		// The term ended mid-send: the next leader sends it.
	case err == nil:
		t.answered()
		t.lastDelivery = now
		out = append(out, replicated.Delivery{ID: no.ID, Tries: tries})
	default:
		if refusedNotice(err) {
			t.answered()
		} else {
			t.failed(now, gen, n.cfg.backoff)
		}
		t.lastError, t.lastFailure = replicated.Clip(msg, maxTargetError), now
		if t.fails >= n.cfg.MaxTries {
			down, downMsg = true, t.downError(msg)
		}
		switch {
		case tries >= n.cfg.MaxTries:
			out = append(out, replicated.Delivery{ID: no.ID, Tries: tries, Error: msg})
		case down:
			out = append(out, replicated.Delivery{ID: no.ID, Tries: tries, Error: downMsg})
		default:
			n.next[no.ID] = now.Add(n.cfg.backoff(tries))
		}
	}
	fails, name := t.fails, t.name
	n.mu.Unlock()

	log := n.log.With("notice", no.Key(), "target", no.Kind(), "to", name, "state", no.State, "job", no.Job, jobs.LogRunID, no.Run, "tries", tries)
	switch {
	case ctx.Err() != nil:
	case err == nil:
		log.Info("notification delivered")
	case len(out) > 0:
		log.Error("notification given up", "err", msg, "failed_in_a_row", fails)
	default:
		log.Warn("notification failed; trying again", "err", msg, "in", n.cfg.backoff(tries), "failed_in_a_row", fails)
	}
	if down {
		waiting := n.takeWaiting(key, no.ID, downMsg)
		if len(waiting) > 0 {
			log.Error("notification target not answering: its waiting notices given up", "notices", len(waiting), "failed_in_a_row", fails)
		}
		out = append(out, waiting...)
	}
	for chunk := range slices.Chunk(out, maxGivenUpPerEntry) {
		if err := n.propose(ctx, replicated.Command{Op: replicated.OpNotified, Notified: &replicated.NotifiedCmd{Deliveries: chunk, At: n.clock.Now().UTC()}}); err != nil {
			log.Warn("could not record the notifications' outcome; the next leader sends them again", "notices", len(chunk), "err", err)
		}
	}
	n.mu.Lock()
	delete(n.inflight, no.ID)
	for _, d := range out {
		delete(n.inflight, d.ID)
	}
	n.mu.Unlock()
}

// deliver sends a notice to its target once.
func (n *Sender) deliver(ctx context.Context, no replicated.Notice) error {
	switch no.Kind() {
	case "webhook":
		b, err := json.Marshal(n.payload(no))
		if err != nil {
			return err
		}
		return n.post(ctx, no.Target.Webhook, no, b)
	case "slack":
		text := n.summary(no)
		if link := n.link(no); link != "" {
			text += "\n<" + link + "|" + no.Run + " on the dashboard>"
		}
		b, err := json.Marshal(map[string]any{
			"text":   text,
			"blocks": []any{map[string]any{"type": "section", "text": map[string]string{"type": "mrkdwn", "text": text}}},
		})
		if err != nil {
			return err
		}
		return n.post(ctx, no.Target.Slack, no, b)
	case "email":
		return n.mail(ctx, no)
	}
	return fmt.Errorf("notice %s has no target", no.Key())
}

// WebhookPayload is the JSON body a webhook target receives.
type WebhookPayload struct {
	// ID is the notice's stable id (also in the Fencecron-Notification-Id
	// header): a receiver that sees it twice may drop the second.
	ID            string     `json:"id"`
	Job           string     `json:"job"`
	Run           string     `json:"run"`
	Attempt       string     `json:"attempt,omitempty"`
	AttemptNumber int        `json:"attempt_number,omitempty"`
	State         string     `json:"state"`
	RunState      string     `json:"run_state"`
	Final         bool       `json:"final"`
	ExitCode      *int       `json:"exit_code,omitempty"`
	Error         string     `json:"error,omitempty"`
	Reason        string     `json:"reason,omitempty"`
	Token         *TokenJSON `json:"token,omitempty"`
	ScheduledAt   time.Time  `json:"scheduled_at"`
	Worker        string     `json:"worker,omitempty"`
	At            time.Time  `json:"at"`
	URL           string     `json:"url,omitempty"`
}

// TokenJSON is a fence token in a webhook payload.
type TokenJSON struct {
	Epoch uint64 `json:"epoch"`
	Seq   uint64 `json:"seq"`
}

func (n *Sender) payload(no replicated.Notice) WebhookPayload {
	p := WebhookPayload{
		ID: no.Key(), Job: no.Job, Run: no.Run, Attempt: no.Attempt, AttemptNumber: no.Number,
		State: no.State, RunState: string(no.RunState), Final: no.Final, ExitCode: no.ExitCode, Error: no.Error,
		Reason: no.Reason, ScheduledAt: no.ScheduledAt.UTC(), Worker: no.Worker, At: no.At.UTC(), URL: n.link(no),
	}
	if no.Token != nil {
		p.Token = &TokenJSON{Epoch: no.Token.Epoch, Seq: no.Token.Seq}
	}
	return p
}

// link is the dashboard's page of the notice's run.
func (n *Sender) link(no replicated.Notice) string {
	base := strings.TrimRight(n.cfg.DashboardURL, "/")
	if base == "" {
		return ""
	}
	return base + "/jobs/" + url.PathEscape(no.Job) + "#run-" + url.PathEscape(no.Run)
}

// summary is a one-line account of the notice.
func (n *Sender) summary(no replicated.Notice) string {
	s := fmt.Sprintf("fencecron: job %s %s (run %s", no.Job, no.State, no.Run)
	if no.Attempt != "" {
		s += fmt.Sprintf(", attempt %d on %s", no.Number, no.Worker)
	}
	s += ")"
	if no.ExitCode != nil {
		s += fmt.Sprintf(", exit code %d", *no.ExitCode)
	}
	if no.Error != "" {
		s += ": " + no.Error
	} else if no.Reason != "" {
		s += ": " + no.Reason
	}
	return s
}

// post sends body as JSON; any 2xx answer is a delivery.
func (n *Sender) post(ctx context.Context, target string, no replicated.Notice, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "fencecron")
	req.Header.Set("Fencecron-Notification-Id", no.Key())
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		// Its text would quote the whole URL: say the host only.
		var ue *url.Error
		if errors.As(err, &ue) {
			return fmt.Errorf("%s %s: %w", ue.Op, redact(target), ue.Err)
		}
		return err
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, maxWebhookReply))
	if resp.StatusCode/100 != 2 {
		return &answerError{target: redact(target), code: resp.StatusCode, status: resp.Status, reply: strings.TrimSpace(string(reply[:min(len(reply), 200)]))}
	}
	return nil
}

// answerError is a target's answer other than 2xx.
type answerError struct {
	target, status, reply string
	code                  int
}

func (e *answerError) Error() string {
	return fmt.Sprintf("%s answered %s: %s", e.target, e.status, e.reply)
}

// redact keeps a target URL's scheme and host: a Slack webhook's path is
// its secret.
func redact(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return "the target"
	}
	return u.Scheme + "://" + u.Host
}

// errNoSMTP: an email notice on a leader without an SMTP server.
var errNoSMTP = errors.New("no SMTP server configured on the leader (top-level notify: host, from)")

// mail sends an email notice through the SMTP server, with STARTTLS
// first when asked, and PLAIN authentication when a username is set.
func (n *Sender) mail(ctx context.Context, no replicated.Notice) error {
	c := n.cfg.SMTP
	if c.Host == "" || c.From == "" {
		return errNoSMTP
	}
	addr := net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	// The term's end cuts the conversation short, wherever it is.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	cl, err := smtp.NewClient(conn, c.Host)
	if err != nil {
		conn.Close()
		return fmt.Errorf("smtp %s: %w", addr, err)
	}
	defer cl.Close()
	if err := cl.Hello("fencecron"); err != nil {
		return fmt.Errorf("smtp %s: hello: %w", addr, err)
	}
	if c.StartTLS {
		if ok, _ := cl.Extension("STARTTLS"); !ok {
			return fmt.Errorf("smtp %s: starttls asked for, and the server does not offer it", addr)
		}
		if err := cl.StartTLS(clustertls.NotifyClientConfig(c.Host, c.RootCAs)); err != nil {
			return fmt.Errorf("smtp %s: starttls: %w", addr, err)
		}
	}
	if c.Username != "" {
		if err := cl.Auth(smtp.PlainAuth("", c.Username, c.Password, c.Host)); err != nil {
			return fmt.Errorf("smtp %s: auth: %w", addr, err)
		}
	}
	if err := cl.Mail(c.From); err != nil {
		return fmt.Errorf("smtp %s: mail from: %w", addr, err)
	}
	for _, to := range no.Target.Email {
		if err := cl.Rcpt(to); err != nil {
			return fmt.Errorf("smtp %s: rcpt %s: %w", addr, to, err)
		}
	}
	w, err := cl.Data()
	if err != nil {
		return fmt.Errorf("smtp %s: data: %w", addr, err)
	}
	if _, err := w.Write(n.message(no)); err != nil {
		return fmt.Errorf("smtp %s: data: %w", addr, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp %s: data: %w", addr, err)
	}
	return cl.Quit()
}

// message is an email notice: headers (Message-ID the notice's stable
// id) and a plain text body.
func (n *Sender) message(no replicated.Notice) []byte {
	var b bytes.Buffer
	host := "fencecron"
	if at := strings.LastIndex(n.cfg.SMTP.From, "@"); at >= 0 {
		host = strings.Trim(n.cfg.SMTP.From[at+1:], "<> ")
	}
	oneLine := func(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }
	fmt.Fprintf(&b, "From: %s\r\n", oneLine(n.cfg.SMTP.From))
	fmt.Fprintf(&b, "To: %s\r\n", oneLine(strings.Join(no.Target.Email, ", ")))
	fmt.Fprintf(&b, "Subject: [fencecron] %s %s (%s)\r\n", oneLine(no.Job), oneLine(no.State), oneLine(no.ScheduledAt.UTC().Format(time.RFC3339)))
	fmt.Fprintf(&b, "Date: %s\r\n", no.At.UTC().Format(time.RFC1123Z))
	// A run id has an "@" of its own, which a Message-ID's left part may not.
	fmt.Fprintf(&b, "Message-ID: <%s@%s>\r\n", strings.NewReplacer("/", ".", "@", ".").Replace(no.Key()), host)
	fmt.Fprintf(&b, "Fencecron-Notification-Id: %s\r\n", no.Key())
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n")
	body := n.summary(no) + "\n\n"
	p := n.payload(no)
	body += fmt.Sprintf("job: %s\nrun: %s\nstate: %s (run %s, final %v)\nscheduled: %s\n", p.Job, p.Run, p.State, p.RunState, p.Final, p.ScheduledAt.Format(time.RFC3339))
	if p.Attempt != "" {
		body += fmt.Sprintf("attempt: %s on %s\n", p.Attempt, p.Worker)
	}
	if p.Token != nil {
		body += fmt.Sprintf("token: %d.%d\n", p.Token.Epoch, p.Token.Seq)
	}
	if p.ExitCode != nil {
		body += fmt.Sprintf("exit code: %d\n", *p.ExitCode)
	}
	if p.Error != "" {
		body += "error: " + p.Error + "\n"
	}
	if p.URL != "" {
		body += "dashboard: " + p.URL + "\n"
	}
	b.WriteString(strings.ReplaceAll(strings.ReplaceAll(body, "\r", ""), "\n", "\r\n"))
	return b.Bytes()
}
