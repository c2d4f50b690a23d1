package notify

import (
	"cmp"
	"errors"
	"net"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Notification targets: the sender keeps each one apart, so that a
// target that hangs or refuses delays its own notices only. A target is
// one destination: a webhook or Slack URL (a Slack workspace's webhooks
// share a host, and one revoked webhook must not hold up the others), or
// the SMTP server with one list of recipients. It is shown by scheme and
// host only: a webhook's path or query may be its secret.
//
// A target that does not answer (no connection, a timeout, a 5xx, 408 or
// 429, an SMTP server that fails the conversation) backs off: Backoff
// after the first failure in a row, doubling up to MaxBackoff, one
// notice at a time, and never more than maxBackingOffSenders senders for
// all such targets together. A target that answers and refuses one
// notice (another 4xx, an SMTP 5xx such as an unknown recipient) does
// not: that notice is retried on its own. Once a target has not answered
// MaxTries tries in a row, each further failure gives up every notice
// waiting for it, recorded as notify_failed; it is still tried, one
// notice per backoff, and its first answer ends the backing off. A
// notice is thus given up after about as long an outage as one notice's
// MaxTries tries would last, however many wait.

// forgetTarget is how long a target with nothing pending is remembered
// (and shown) after its last try, when it was failing: a new notice to
// a target that is down waits for its backoff instead of starting over.
const forgetTarget = time.Hour

// maxTargetError bounds the last error kept for a target.
const maxTargetError = 300

// maxTargetJobs bounds the jobs named beside a target.
const maxTargetJobs = 5

// targetState is one notification target as a term's sender tracks it.
type targetState struct {
	name, kind string
	// jobs are the first jobs of the notices waiting for it.
	jobs []string
	// pending counts its notices in the state, in flight included.
	pending, inflight int
	// fails counts the tries in a row it did not answer; retryAt is when
	// it is tried again after the last of them.
	fails   int
	retryAt time.Time
	// gen changes with every outcome that says how the target is: a try
	// started before the last one says nothing more (two tries that time
	// out together are one failure).
	gen                                uint64
	lastError                          string
	lastTry, lastFailure, lastDelivery time.Time
}

// backingOff reports whether the target's last counted try failed.
func (t *targetState) backingOff() bool { return t.fails > 0 }

// admits reports whether the target may be sent one more notice now;
// backingOff counts the senders held by targets backing off.
func (t *targetState) admits(now time.Time, backingOff int) bool {
	if !t.backingOff() {
		return t.inflight < maxPerTarget
	}
	return t.inflight == 0 && !now.Before(t.retryAt) && backingOff < maxBackingOffSenders
}

// answered records that the target answered a try.
func (t *targetState) answered() {
	t.fails, t.retryAt = 0, time.Time{}
	t.gen++
}

// failed records that a try begun at generation gen got no answer.
func (t *targetState) failed(now time.Time, gen uint64, backoff func(int) time.Duration) {
	if gen != t.gen {
		return
	}
	t.gen++
	t.fails++
	t.retryAt = now.Add(backoff(t.fails))
}

// downError is why the notices waiting for a target that keeps failing
// are given up.
func (t *targetState) downError(last string) string {
	return t.name + " did not answer " + strconv.Itoa(t.fails) + " tries in a row; the last: " + last
}

// refusedNotice reports whether err is a target's answer refusing that
// one notice, rather than a sign that the target is down.
func refusedNotice(err error) bool {
	if ae, ok := errors.AsType[*answerError](err); ok {
		return ae.code/100 == 4 && ae.code != 408 && ae.code != 429
	}
	if te, ok := errors.AsType[*textproto.Error](err); ok {
		return te.Code/100 == 5
	}
	return false
}

// targetKey is the target a notice goes to, whole (it is never shown).
func (n *Sender) targetKey(no replicated.Notice) string {
	switch no.Kind() {
	case jobs.NotifyWebhook:
		return "webhook " + no.Target.Webhook
	case jobs.NotifySlack:
		return "slack " + no.Target.Slack
	case jobs.NotifyEmail:
		return "email " + n.smtpAddr() + " " + strings.Join(no.Target.Email, ",")
	}
	return "none"
}

// targetName is how a notice's target is shown: scheme and host.
func (n *Sender) targetName(no replicated.Notice) string {
	switch no.Kind() {
	case jobs.NotifyWebhook:
		return redact(no.Target.Webhook)
	case jobs.NotifySlack:
		return redact(no.Target.Slack)
	case jobs.NotifyEmail:
		return "smtp://" + n.smtpAddr()
	}
	return "none"
}

func (n *Sender) smtpAddr() string {
	return net.JoinHostPort(n.cfg.SMTP.Host, strconv.Itoa(n.cfg.SMTP.Port))
}

// scrub is err's text, as recorded and shown: with the notice's target
// URL cut to scheme and host wherever it is quoted, and clipped.
func (n *Sender) scrub(err error, no replicated.Notice) string {
	s := err.Error()
	for _, u := range []string{no.Target.Webhook, no.Target.Slack} {
		if u != "" {
			s = strings.ReplaceAll(s, u, redact(u))
		}
	}
	return replicated.Clip(s, fsm.MaxAuditDetail)
}

// busy counts the notices in flight, and those to targets backing off;
// n.mu is held.
func (n *Sender) busy() (all, backingOff int) {
	for _, t := range n.targets {
		all += t.inflight
		if t.backingOff() {
			backingOff += t.inflight
		}
	}
	return all, backingOff
}

// countPending tracks the targets of the pending notices, counts them
// and names their first jobs, and returns the keys of those it saw; n.mu
// is held.
func (n *Sender) countPending(pending []replicated.Notice) map[string]bool {
	seen := map[string]bool{}
	for _, no := range pending {
		key := n.targetKey(no)
		t := n.targets[key]
		if t == nil {
			t = &targetState{name: n.targetName(no), kind: no.Kind()}
			n.targets[key] = t
		}
		if !seen[key] {
			seen[key] = true
			t.pending, t.jobs = 0, t.jobs[:0]
		}
		t.pending++
		if len(t.jobs) < maxTargetJobs && !slices.Contains(t.jobs, no.Job) {
			t.jobs = append(t.jobs, no.Job)
		}
	}
	return seen
}

// forgetTargets drops the targets with nothing pending or in flight,
// unless they failed within forgetTarget; n.mu is held.
func (n *Sender) forgetTargets(seen map[string]bool, now time.Time) {
	for key, t := range n.targets {
		if seen[key] || t.inflight > 0 {
			continue
		}
		t.pending = 0
		if !t.backingOff() || now.Sub(t.lastTry) > forgetTarget {
			delete(n.targets, key)
		}
	}
}

// takeWaiting marks the notices waiting for target key (pending, not in
// flight, other than except) as in flight, and returns them given up
// with msg.
func (n *Sender) takeWaiting(key string, except uint64, msg string) []replicated.Delivery {
	pending := n.state.Notices()
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []replicated.Delivery
	for _, no := range pending {
		if no.ID == except || n.inflight[no.ID] || n.targetKey(no) != key {
			continue
		}
		n.inflight[no.ID] = true
		out = append(out, replicated.Delivery{ID: no.ID, Tries: n.tries[no.ID], Error: msg})
	}
	return out
}

// Target is one notification target as the leader's sender sees it
// (GET /api/v1/status, the Overview).
type Target struct {
	// Target is the target's scheme and host (smtp://host:port for
	// email): never its path or query, which may be its secret.
	Target string `json:"target"`
	Kind   string `json:"kind"`
	// Jobs are the first few jobs whose notices wait for it.
	Jobs []string `json:"jobs,omitempty"`
	// Pending counts its notices not yet delivered or given up, InFlight
	// those being tried now.
	Pending  int `json:"pending"`
	InFlight int `json:"in_flight"`
	// BackingOff says its last try got no answer: it is tried one notice
	// at a time, not before RetryAt. Failures counts the tries in a row
	// that got none.
	BackingOff bool      `json:"backing_off"`
	Failures   int       `json:"failures"`
	RetryAt    time.Time `json:"retry_at,omitzero"`
	// LastError is the last try's error, if it failed.
	LastError    string    `json:"last_error,omitempty"`
	LastFailure  time.Time `json:"last_failure,omitzero"`
	LastDelivery time.Time `json:"last_delivery,omitzero"`
}

// Targets returns the targets the sender tracks: those with notices
// pending, and those that failed within the last hour, the ones backing
// off first.
func (n *Sender) Targets() []Target {
	n.mu.Lock()
	out := make([]Target, 0, len(n.targets))
	for _, t := range n.targets {
		v := Target{Target: t.name, Kind: t.kind, Jobs: slices.Clone(t.jobs), Pending: t.pending, InFlight: t.inflight,
			BackingOff: t.backingOff(), Failures: t.fails, RetryAt: t.retryAt, LastError: t.lastError,
			LastFailure: t.lastFailure, LastDelivery: t.lastDelivery}
		out = append(out, v)
	}
	n.mu.Unlock()
	slices.SortFunc(out, func(a, b Target) int {
		if a.BackingOff != b.BackingOff {
			if a.BackingOff {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(b.Failures, a.Failures), cmp.Compare(b.Pending, a.Pending), cmp.Compare(a.Target, b.Target))
	})
	return out
}
