package auth

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"time"
)

// Guessing the API token, at /login or as a Bearer header, is slowed per
// client address: loginMaxFailures wrong tokens within loginWindow lock
// the address out for loginLockout; after that every further wrong token
// locks it out again for twice as long as the last time, up to
// loginMaxLockout. An address quiet for loginForget after its last
// lockout starts afresh, and a right token forgets its failures at once.
// During a lockout no token is checked, the right one included: 429 with
// Retry-After.
//
// The address is the peer's (RemoteAddr), never X-Forwarded-For, which a
// client writes itself; an IPv6 client counts by its /64, which one host
// usually holds whole. Clients behind one NAT share a count: one of them
// guessing locks the others out too, the price of not trusting headers.
//
// The table holds at most loginTableSize addresses, dropping the one that
// failed longest ago, so many addresses cannot grow it without bound.
const (
	loginMaxFailures = 5
	loginWindow      = 15 * time.Minute
	loginLockout     = 30 * time.Second
	loginMaxLockout  = 15 * time.Minute
	loginForget      = time.Hour
	loginTableSize   = 4096
)

// clientKey is the address a request's failures count against.
func clientKey(r *http.Request) string {
	ip := remoteIP(r)
	if ip == nil {
		return r.RemoteAddr
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// loginThrottle counts failed tokens per client address. Times come from
// the caller (the Guard's Clock). It is safe for concurrent use.
type loginThrottle struct {
	mu      sync.Mutex
	max     int
	entries map[string]*list.Element // of *throttled
	byAge   *list.List               // front: the least recent failure
}

type throttled struct {
	key      string
	failures int       // since windowAt, or since the last lockout
	windowAt time.Time // first failure counted
	last     time.Time // last failure
	lockouts int
	until    time.Time // locked out until
}

func newLoginThrottle(max int) *loginThrottle {
	return &loginThrottle{max: max, entries: map[string]*list.Element{}, byAge: list.New()}
}

// locked returns how long key stays locked out after now, or 0.
func (t *loginThrottle) locked(key string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if el, ok := t.entries[key]; ok {
		if e := el.Value.(*throttled); now.Before(e.until) {
			return e.until.Sub(now)
		}
	}
	return 0
}

// fail records a wrong token from key at now. If that locks key out, it
// returns the lockout's length and the failures it punishes; else 0, 0.
func (t *loginThrottle) fail(key string, now time.Time) (lockout time.Duration, failures int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	el, ok := t.entries[key]
	if !ok {
		if t.byAge.Len() >= t.max {
			oldest := t.byAge.Front()
			delete(t.entries, oldest.Value.(*throttled).key)
			t.byAge.Remove(oldest)
		}
		el = t.byAge.PushBack(&throttled{key: key})
		t.entries[key] = el
	}
	t.byAge.MoveToBack(el)
	e := el.Value.(*throttled)
	switch {
	case e.lockouts > 0 && now.Sub(e.last) > loginForget && !now.Before(e.until):
		*e = throttled{key: key}
	case e.lockouts == 0 && now.Sub(e.windowAt) > loginWindow:
		e.failures = 0
	}
	if e.failures == 0 {
		e.windowAt = now
	}
	e.failures++
	e.last = now
	if e.lockouts == 0 && e.failures < loginMaxFailures {
		return 0, 0
	}
	lockout = loginLockout << min(e.lockouts, 16)
	lockout = min(lockout, loginMaxLockout)
	e.lockouts++
	e.until = now.Add(lockout)
	failures, e.failures = e.failures, 0
	return lockout, failures
}

// succeed forgets key's failures: it knew the token.
func (t *loginThrottle) succeed(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if el, ok := t.entries[key]; ok {
		t.byAge.Remove(el)
		delete(t.entries, key)
	}
}

// size is the number of addresses in the table.
func (t *loginThrottle) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// Lockouts go into the cluster's audit trail, one entry per lockout. An
// attacker with many addresses could still make one per address, and
// each is a Raft entry on every server; so a node proposes at most
// auditBurst entries at once and one per auditEvery after that, and
// counts the lockouts it left out into its next entry. Logs and
// fencecron_login_failures_total see every failure regardless.
const (
	auditBurst = 5
	auditEvery = 30 * time.Second
)

// auditLimiter is a token bucket over the Guard's Clock.
type auditLimiter struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int // lockouts not recorded since the last entry
}

func newAuditLimiter() *auditLimiter { return &auditLimiter{tokens: auditBurst} }

// allow reports whether an entry may be proposed at now; if so it also
// returns how many were left out before it, and starts counting afresh.
func (a *auditLimiter) allow(now time.Time) (ok bool, leftOut int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.last.IsZero() && now.After(a.last) {
		a.tokens = min(auditBurst, a.tokens+float64(now.Sub(a.last))/float64(auditEvery))
	}
	if now.After(a.last) {
		a.last = now
	}
	if a.tokens < 1 {
		a.suppressed++
		return false, 0
	}
	a.tokens--
	leftOut, a.suppressed = a.suppressed, 0
	return true, leftOut
}

// Sessions live on the server: a browser's cookie names one (and is
// signed, so a session of an old API token is no session), and the table
// says whether it is still live. Logging out deletes it there, so a
// copied cookie stops working at once, not when it expires. The table is
// in memory only: a restart logs everyone out, which is the safer side to
// err on. It holds at most maxSessions, dropping the oldest.
const maxSessions = 1024

type sessionTable struct {
	mu   sync.Mutex
	max  int
	live map[string]sessionEntry // by nonce
}

// sessionEntry is a live session: until when, and whose. Accessor is
// the ACL token a browser logged in with ("" for api.token); the
// session holds what that token holds as it stands, and ends when the
// token is revoked or expires.
type sessionEntry struct {
	exp      time.Time
	accessor string
}

func newSessionTable(max int) *sessionTable {
	return &sessionTable{max: max, live: map[string]sessionEntry{}}
}

// maxSessionsPerToken bounds the live sessions of one ACL token, so that
// one token's logins cannot push everyone else's sessions out.
const maxSessionsPerToken = 16

// add makes nonce a live session of accessor until exp.
func (t *sessionTable) add(nonce, accessor string, exp, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if accessor != "" {
		if n, oldest := t.oldest(func(e sessionEntry) bool { return e.accessor == accessor }); n >= maxSessionsPerToken {
			delete(t.live, oldest)
		}
	}
	if len(t.live) >= t.max {
		for n, e := range t.live {
			if !now.Before(e.exp) {
				delete(t.live, n)
			}
		}
		if n, oldest := t.oldest(func(sessionEntry) bool { return true }); n >= t.max {
			delete(t.live, oldest)
		}
	}
	t.live[nonce] = sessionEntry{exp: exp, accessor: accessor}
}

// oldest counts the sessions of, and names the one soonest to expire
// among, those that match (t.mu held).
func (t *sessionTable) oldest(match func(sessionEntry) bool) (n int, nonce string) {
	var exp time.Time
	for k, e := range t.live {
		if !match(e) {
			continue
		}
		if n++; nonce == "" || e.exp.Before(exp) {
			nonce, exp = k, e.exp
		}
	}
	return n, nonce
}

// lookup returns the session nonce names, if it is live at now.
func (t *sessionTable) lookup(nonce string, now time.Time) (sessionEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.live[nonce]
	if ok && !now.Before(e.exp) {
		delete(t.live, nonce)
		return sessionEntry{}, false
	}
	return e, ok
}

// remove ends the session nonce.
func (t *sessionTable) remove(nonce string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.live, nonce)
}
