package fencedstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
)

// The expiry rows of the rules: a call whose expiry is before now is
// refused as expired, changes nothing, and its decision records the
// expiry; at or after now, and without one, the other rows decide.
func TestDecide_Expiry(t *testing.T) {
	now := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	tk := func(e, s uint64) fencedstore.Token { return fencedstore.Token{Epoch: e, Seq: s} }
	m := fencedstore.Meta{Key: "k", Version: 3, Greatest: tk(2, 5), Token: tk(2, 5), Attempt: "w", Hash: "h", Size: 1, Updated: now.Add(-time.Hour)}
	cases := []struct {
		name    string
		tok     fencedstore.Token
		expires time.Time
		pub     fencedstore.Outcome // DecidePublish's outcome
		est     fencedstore.Outcome // DecideEstablish's outcome
	}{
		{"no expiry", tk(3, 1), time.Time{}, fencedstore.Applied, fencedstore.Established},
		{"expiry ahead", tk(3, 1), now.Add(time.Second), fencedstore.Applied, fencedstore.Established},
		{"expiry now is still good", tk(3, 1), now, fencedstore.Applied, fencedstore.Established},
		{"expired a nanosecond ago", tk(3, 1), now.Add(-time.Nanosecond), fencedstore.Expired, fencedstore.Expired},
		{"expired long ago", tk(3, 1), now.Add(-24 * time.Hour), fencedstore.Expired, fencedstore.Expired},
		{"expired and stale: expired", tk(1, 1), now.Add(-time.Second), fencedstore.Expired, fencedstore.Expired},
		{"stale, not expired", tk(1, 1), now.Add(time.Second), fencedstore.StaleOwner, fencedstore.StaleOwner},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			next, d := fencedstore.DecidePublish(m, fencedstore.PublishRequest{Key: "k", Token: tc.tok, Attempt: "a", Body: []byte("b"), Expires: tc.expires}, "hb", now)
			if got, want := d.Outcome, tc.pub; got != want {
				t.Errorf("publish: outcome %s, want %s", got, want)
			}
			checkDecision(t, "publish", m, next, d, tc.expires, now)
			next, d = fencedstore.DecideEstablish(m, fencedstore.EstablishRequest{Key: "k", Token: tc.tok, Attempt: "a", Expires: tc.expires}, now)
			if got, want := d.Outcome, tc.est; got != want {
				t.Errorf("establish: outcome %s, want %s", got, want)
			}
			checkDecision(t, "establish", m, next, d, tc.expires, now)
		})
	}
}

func checkDecision(t *testing.T, call string, m, next fencedstore.Meta, d fencedstore.Decision, expires, now time.Time) {
	t.Helper()
	if !d.Expires.Equal(expires) || !d.Time.Equal(now) {
		t.Errorf("%s: decision records expiry %v at %v, want %v at %v", call, d.Expires, d.Time, expires, now)
	}
	if d.Outcome.Accepted() {
		return
	}
	if next != m || d.Version != m.Version || d.Greatest != m.Greatest {
		t.Errorf("%s: a %s decision changed the key: %+v -> %+v (decision %+v)", call, d.Outcome, m, next, d)
	}
	if d.Outcome == fencedstore.Expired && !errors.Is(d.Err(), fencedstore.ErrExpired) {
		t.Errorf("%s: expired decision's error is %v", call, d.Err())
	}
	if !fencedstore.IsDecision(d.Err()) {
		t.Errorf("%s: %v is not a decision", call, d.Err())
	}
}

func TestOutcome_Accepted(t *testing.T) {
	for o, want := range map[fencedstore.Outcome]bool{
		fencedstore.Applied: true, fencedstore.Established: true, fencedstore.Conflict: true,
		fencedstore.StaleOwner: false, fencedstore.Expired: false,
	} {
		if got := o.Accepted(); got != want {
			t.Errorf("%s.Accepted() = %v, want %v", o, got, want)
		}
	}
}
