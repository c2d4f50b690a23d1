package auth

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs/clocktest"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// An attacker with many addresses cannot flood the Raft log: a node
// proposes at most auditBurst lockout entries at once, then one per
// auditEvery, and the next entry counts those it left out.
func TestGuard_LockoutAuditsAreRateLimited(t *testing.T) {
	clock := clocktest.New(at(50))
	audits := &auditTrail{}
	g := newGuard(t, Config{Token: testToken, Clock: clock, Auditor: audits})
	lockOut := func(ip string) {
		for i := 0; i < loginMaxFailures; i++ {
			g.checkToken(from(ip+":4000"), "nope", "login")
		}
		if err := g.checkToken(from(ip+":4000"), testToken, "login"); !errors.Is(err, wire.ErrTooMany) {
			t.Fatalf("%s not locked out: %v", ip, err)
		}
	}
	for i := 1; i <= 20; i++ {
		lockOut(fmt.Sprintf("198.51.100.%d", i))
	}
	waitFor(t, 5*time.Second, "the first audit entries", func() bool { return len(audits.entries()) == auditBurst })
	clock.Advance(auditEvery)
	lockOut("203.0.113.1")
	waitFor(t, 5*time.Second, "one more audit entry", func() bool { return len(audits.entries()) == auditBurst+1 })
	last := audits.entries()[auditBurst]
	if want := "5 failed logins from 203.0.113.1; locked out for 30s (and 15 more lockouts on this node not recorded one by one)"; last.Detail != want {
		t.Errorf("entry after the pause = %q, want %q", last.Detail, want)
	}
	if n := g.throttle.size(); n != 21 {
		t.Errorf("throttle holds %d addresses, want 21", n)
	}
}

// The throttle's rules on their own: the window, the growing lockouts up
// to their cap, forgetting a quiet address, and the bounded table.
func TestLoginThrottle(t *testing.T) {
	t.Run("window", func(t *testing.T) {
		th := newLoginThrottle(10)
		now := at(0)
		for range loginMaxFailures - 1 {
			if d, _ := th.fail("a", now); d != 0 {
				t.Fatalf("locked out after fewer than %d failures", loginMaxFailures)
			}
		}
		now = now.Add(loginWindow + time.Second)
		if d, _ := th.fail("a", now); d != 0 {
			t.Errorf("failures older than the window still count: locked out for %s", d)
		}
	})
	t.Run("growing lockouts", func(t *testing.T) {
		th := newLoginThrottle(10)
		now := at(0)
		var d time.Duration
		for range loginMaxFailures {
			d, _ = th.fail("a", now)
		}
		var got []time.Duration
		for d > 0 && len(got) < 8 {
			got = append(got, d)
			if th.locked("a", now.Add(d-time.Nanosecond)) == 0 || th.locked("a", now.Add(d)) != 0 {
				t.Fatalf("lockout of %s does not end exactly then", d)
			}
			now = now.Add(d)
			d, _ = th.fail("a", now)
		}
		want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 15 * time.Minute, 15 * time.Minute, 15 * time.Minute}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("lockouts = %v, want %v", got, want)
		}
		// Quiet for loginForget after the lockout: a fresh start.
		now = now.Add(d + loginForget + time.Second)
		if d, _ := th.fail("a", now); d != 0 {
			t.Errorf("a long-quiet address is locked out at its first failure for %s", d)
		}
	})
	t.Run("bounded table", func(t *testing.T) {
		th := newLoginThrottle(3)
		for i, key := range []string{"a", "b", "c", "a", "d"} {
			th.fail(key, at(i))
		}
		if n := th.size(); n != 3 {
			t.Errorf("table holds %d addresses, want 3", n)
		}
		th.mu.Lock()
		_, hasB := th.entries["b"]
		_, hasA := th.entries["a"]
		th.mu.Unlock()
		if hasB || !hasA {
			t.Errorf("evicted the wrong address: b kept %v, a kept %v; want the least recent (b) gone", hasB, hasA)
		}
	})
	t.Run("client key", func(t *testing.T) {
		for remote, want := range map[string]string{
			"10.1.2.3:4000":               "10.1.2.3",
			"[::ffff:10.1.2.3]:4000":      "10.1.2.3",
			"[2001:db8:1:2:3:4:5:6]:4000": "2001:db8:1:2::/64",
			"[2001:db8:1:2:ffff::1]:4001": "2001:db8:1:2::/64",
			"[2001:db8:1:3:3:4:5:6]:4000": "2001:db8:1:3::/64",
			"[::1]:4000":                  "::/64",
		} {
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = remote
			req.Header.Set("X-Forwarded-For", "203.0.113.9")
			if got := clientKey(req); got != want {
				t.Errorf("clientKey(%s) = %q, want %q", remote, got, want)
			}
		}
	})
}
