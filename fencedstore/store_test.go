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
			next, d := fencedstore.DecidePublish(m, fencedstore.Token{}, fencedstore.PublishRequest{Key: "k", Token: tc.tok, Attempt: "a", Body: []byte("b"), Expires: tc.expires}, "hb", now)
			if got, want := d.Outcome, tc.pub; got != want {
				t.Errorf("publish: outcome %s, want %s", got, want)
			}
			checkDecision(t, "publish", m, next, d, tc.expires, now)
			next, d = fencedstore.DecideEstablish(m, fencedstore.Token{}, fencedstore.EstablishRequest{Key: "k", Token: tc.tok, Attempt: "a", Expires: tc.expires}, now)
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

// A job's floor revokes its tokens up to it: a call at or below the floor
// is refused as stale_owner whatever the key holds (a new key, a key
// whose greatest token is the call's own), records the floor, and
// changes nothing; expiry is still decided first, and a token above the
// floor is decided by the other rows.
func TestDecide_Floor(t *testing.T) {
	now := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	tk := func(e, s uint64) fencedstore.Token { return fencedstore.Token{Epoch: e, Seq: s} }
	floor := tk(2, 5)
	own := fencedstore.Meta{Key: "k", Version: 1, Greatest: tk(2, 5), Token: tk(2, 5), Attempt: "a", Hash: "hb", Size: 1, Updated: now.Add(-time.Hour)}
	cases := []struct {
		name     string
		m        fencedstore.Meta
		tok      fencedstore.Token
		expires  time.Time
		pub, est fencedstore.Outcome
		refused  bool // by the floor
	}{
		{"the released token on its own key", own, tk(2, 5), time.Time{}, fencedstore.StaleOwner, fencedstore.StaleOwner, true},
		{"the released token on a new key", fencedstore.Meta{Key: "k"}, tk(2, 5), time.Time{}, fencedstore.StaleOwner, fencedstore.StaleOwner, true},
		{"an older token of the job on a new key", fencedstore.Meta{Key: "k"}, tk(1, 9), time.Time{}, fencedstore.StaleOwner, fencedstore.StaleOwner, true},
		{"expired is decided first", fencedstore.Meta{Key: "k"}, tk(2, 5), now.Add(-time.Second), fencedstore.Expired, fencedstore.Expired, false},
		{"a newer token (the retry) is not refused", own, tk(2, 6), time.Time{}, fencedstore.Applied, fencedstore.Established, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			next, d := fencedstore.DecidePublish(tc.m, floor, fencedstore.PublishRequest{Key: "k", Token: tc.tok, Attempt: "a", Body: []byte("x"), Expires: tc.expires}, "hx", now)
			check := func(call string, next fencedstore.Meta, d fencedstore.Decision, want fencedstore.Outcome) {
				t.Helper()
				if got := d.Outcome; got != want {
					t.Errorf("%s: outcome %s, want %s", call, got, want)
				}
				if got, want := !d.Floor.IsZero(), tc.refused; got != want {
					t.Errorf("%s: decision records floor %s; want it recorded: %v", call, d.Floor, want)
				}
				var rev *fencedstore.RevokedError
				if got := errors.As(d.Err(), &rev); got != tc.refused || (tc.refused && (rev.Floor != floor || !errors.Is(d.Err(), fencedstore.ErrStaleOwner))) {
					t.Errorf("%s: err = %v, want a RevokedError at %s wrapping ErrStaleOwner: %v", call, d.Err(), floor, tc.refused)
				}
				if tc.refused && (next != tc.m || d.Version != tc.m.Version || d.Greatest != tc.m.Greatest) {
					t.Errorf("%s: a refusal changed the key: %+v -> %+v", call, tc.m, next)
				}
			}
			check("publish", next, d, tc.pub)
			next, d = fencedstore.DecideEstablish(tc.m, floor, fencedstore.EstablishRequest{Key: "k", Token: tc.tok, Attempt: "a", Expires: tc.expires}, now)
			check("establish", next, d, tc.est)
		})
	}
	if got := fencedstore.RaiseTo(tk(3, 1), tk(2, 9)); got != tk(3, 1) {
		t.Errorf("RaiseTo lowered a floor: %s", got)
	}
	if got := fencedstore.RaiseTo(tk(2, 9), tk(3, 1)); got != tk(3, 1) {
		t.Errorf("RaiseTo(2.9, 3.1) = %s", got)
	}
}
