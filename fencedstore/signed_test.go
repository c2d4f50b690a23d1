package fencedstore_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
)

func mustSigner(t testing.TB, secret string) *fencedstore.Signer {
	t.Helper()
	s, err := fencedstore.NewSigner([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const testSecret = "0123456789abcdef-test-cluster-secret"

// expiry is the expiry of the tests' tokens: 2026-07-01T09:12:30Z.
var expiry = time.Unix(1782897150, 0).UTC()

func TestSigner_RoundTrip(t *testing.T) {
	s := mustSigner(t, testSecret)
	want := fencedstore.SignedToken{
		Token:   fencedstore.Token{Epoch: 7, Seq: 1042},
		Attempt: "monthly-report@20260701T090000Z.2",
		Scope:   fencedstore.Scope{Job: "monthly-report", Prefix: "reports/"},
		Expires: expiry,
	}
	text, err := s.Sign(want)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text, "v2.7.1042.1782897150.") || strings.Count(text, ".") != 6 {
		t.Errorf("text form = %q, want v2.7.1042.1782897150.<attempt>.<scope>.<mac>", text)
	}
	got, err := s.Verify(text)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if got != want {
		t.Errorf("verify = %+v, want %+v", got, want)
	}
	// Same input, same text: the form is canonical.
	if again, _ := s.Sign(want); again != text {
		t.Errorf("signing twice gave %q and %q", text, again)
	}
	// The expiry is carried in whole seconds, rounded down, in UTC.
	local := want
	local.Expires = expiry.Add(999 * time.Millisecond).In(time.FixedZone("CEST", 2*3600))
	text2, err := s.Sign(local)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Verify(text2); err != nil || got != want {
		t.Errorf("verify of a token signed with a sub-second local expiry = %+v, %v; want %+v", got, err, want)
	}
	// The greatest token there is signs and verifies.
	top := want
	top.Token = fencedstore.Token{Epoch: 1<<63 - 1, Seq: 1<<63 - 1}
	text3, err := s.Sign(top)
	if err != nil {
		t.Fatalf("sign (2^63-1, 2^63-1): %v", err)
	}
	if got, err := s.Verify(text3); err != nil || got != top {
		t.Errorf("verify (2^63-1, 2^63-1) = %+v, %v", got, err)
	}
}

func TestSigner_Refuses(t *testing.T) {
	s := mustSigner(t, testSecret)
	other := mustSigner(t, "another-cluster-secret-entirely-unrelated")
	st := fencedstore.SignedToken{Token: fencedstore.Token{Epoch: 3, Seq: 9}, Attempt: "a", Scope: fencedstore.Scope{Job: "j", Prefix: "reports/"}, Expires: expiry}
	good, err := s.Sign(st)
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := other.Sign(st)
	// A forged epoch: take a good token and raise its epoch.
	forgedEpoch := strings.Replace(good, "v2.3.9.", "v2.999999.9.", 1)
	f := strings.Split(good, ".")
	// A moved expiry: the MAC covers it.
	later := strings.Replace(good, ".1782897150.", ".1782897151.", 1)
	farLater := strings.Replace(good, ".1782897150.", ".253402300799.", 1)
	// A forged scope: re-use the MAC with a wider prefix.
	wider, _ := other.Sign(fencedstore.SignedToken{Token: st.Token, Attempt: "a", Scope: fencedstore.Scope{Job: "j", Prefix: "r/"}, Expires: expiry})
	forgedScope := strings.Join(append(f[:5:5], strings.Split(wider, ".")[5], f[6]), ".")
	// A flipped bit in the MAC.
	mac := []byte(f[6])
	mac[0] ^= 1
	flipped := strings.Join(append(f[:6:6], string(mac)), ".")
	// The v1 form of older versions: no expiry field.
	v1 := "v1.3.9." + strings.Join(f[4:], ".")

	cases := []struct {
		name, text, why string
	}{
		{"empty", "", "empty"},
		{"plain epoch.seq", "3.9", "unsigned"},
		{"no mac field", strings.Join(f[:6], "."), "unsigned"},
		{"empty mac", strings.Join(f[:6], ".") + ".", "unsigned"},
		{"v1 token", v1, "a v1 token carries no expiry: it was signed by an older fencecron"},
		{"other version", "v3" + good[2:], "does not start"},
		{"too many fields", good + ".x", "fields"},
		{"no expiry field", strings.Replace(good, ".1782897150.", ".", 1) + ".x", "expiry"},
		{"leading zero epoch", strings.Replace(good, "v2.3.", "v2.03.", 1), "epoch"},
		{"signed epoch", strings.Replace(good, "v2.3.", "v2.+3.", 1), "epoch"},
		{"huge seq", strings.Replace(good, ".9.", ".99999999999999999999999.", 1), "seq"},
		{"zero expiry", strings.Replace(good, ".1782897150.", ".0.", 1), "expiry"},
		{"expiry after 9999", strings.Replace(good, ".1782897150.", ".253402300800.", 1), "expiry"},
		{"negative expiry", strings.Replace(good, ".1782897150.", ".-5.", 1), "expiry"},
		{"padded base64", strings.Replace(good, "."+f[4]+".", "."+f[4]+"=.", 1), "attempt"},
		{"no scope separator", strings.Replace(good, "~", "", 1), "scope"},
		{"short mac", strings.Join(append(f[:6:6], "AAAA"), "."), "signature is not"},
		{"forged epoch", forgedEpoch, "does not match"},
		{"expiry moved a second", later, "does not match"},
		{"expiry moved to 9999", farLater, "does not match"},
		{"forged scope", forgedScope, "does not match"},
		{"flipped mac bit", flipped, ""},
		{"other cluster", foreign, "does not match"},
		{"too long", "v2." + strings.Repeat("1", fencedstore.MaxTokenTextLen), "longer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Verify(tc.text)
			if !errors.Is(err, fencedstore.ErrBadToken) {
				t.Fatalf("verify %q: err = %v, want ErrBadToken", tc.text, err)
			}
			if !strings.Contains(err.Error(), tc.why) {
				t.Errorf("verify %q: err = %q, want it to say %q", tc.text, err, tc.why)
			}
		})
	}

	for _, tok := range []fencedstore.Token{{}, {Epoch: 1}, {Seq: 1}, {Epoch: 1 << 63, Seq: 1}, {Epoch: 1, Seq: 1 << 63}, {Epoch: 1 << 63, Seq: 1 << 63}} {
		if _, err := s.Sign(fencedstore.SignedToken{Token: tok, Scope: st.Scope, Expires: expiry}); !errors.Is(err, fencedstore.ErrBadToken) {
			t.Errorf("sign %s: err = %v, want ErrBadToken", tok, err)
		}
	}
	for name, tc := range map[string]struct {
		change func(*fencedstore.SignedToken)
		why    string
	}{
		"no expiry":          {func(st *fencedstore.SignedToken) { st.Expires = time.Time{} }, "no expiry"},
		"expiry before 1970": {func(st *fencedstore.SignedToken) { st.Expires = time.Unix(-1, 0) }, "out of range"},
		"expiry after 9999":  {func(st *fencedstore.SignedToken) { st.Expires = time.Unix(fencedstore.MaxExpiresUnix+1, 0) }, "out of range"},
		"whole-store scope":  {func(st *fencedstore.SignedToken) { st.Scope.Prefix = "" }, "no token may write every key"},
	} {
		bad := st
		tc.change(&bad)
		if _, err := s.Sign(bad); !errors.Is(err, fencedstore.ErrBadToken) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("sign with %s: err = %v, want ErrBadToken saying %q", name, err, tc.why)
		}
	}
	if _, err := fencedstore.NewSigner([]byte("short")); err == nil {
		t.Error("NewSigner accepted a 5-byte secret")
	}
}

func TestSigner_Credential(t *testing.T) {
	s := mustSigner(t, testSecret)
	if !s.CheckCredential(s.Credential()) {
		t.Error("the signer's own credential does not check")
	}
	if other := mustSigner(t, testSecret+"x"); s.CheckCredential(other.Credential()) {
		t.Error("another secret's credential checks")
	}
	if s.CheckCredential("") {
		t.Error("the empty credential checks")
	}
	if strings.Contains(s.Credential(), testSecret) {
		t.Error("the credential contains the secret")
	}
}

func TestScope_Covers(t *testing.T) {
	cases := []struct {
		prefix, key string
		want        bool
	}{
		{"", "anything/at/all", false},
		{"", "", false},
		{"reports/", "reports/2026-07.csv", true},
		{"reports/", "reports/a/b", true},
		{"reports/", "reportsX/a", false},
		{"reports/", "logs/a", false},
		{"reports/a.csv", "reports/a.csv", true},
		{"reports/a.csv", "reports/a.csv2", false},
	}
	for _, tc := range cases {
		if got := (fencedstore.Scope{Prefix: tc.prefix}).Covers(tc.key); got != tc.want {
			t.Errorf("scope %q covers %q = %v, want %v", tc.prefix, tc.key, got, tc.want)
		}
	}
}

func TestParseToken(t *testing.T) {
	good := map[string]fencedstore.Token{"1.2": {Epoch: 1, Seq: 2}, "0.0": {}, "18446744073709551615.7": {Epoch: 1<<64 - 1, Seq: 7}}
	for s, want := range good {
		got, err := fencedstore.ParseToken(s)
		if err != nil || got != want {
			t.Errorf("ParseToken(%q) = %v, %v; want %v", s, got, err, want)
		}
		if got.String() != s {
			t.Errorf("ParseToken(%q).String() = %q", s, got.String())
		}
	}
	for _, s := range []string{"", "1", "1.", ".1", "01.1", "1.-1", "1.2.3", "a.b", "1.18446744073709551616"} {
		if _, err := fencedstore.ParseToken(s); !errors.Is(err, fencedstore.ErrBadToken) {
			t.Errorf("ParseToken(%q): err = %v, want ErrBadToken", s, err)
		}
	}
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// During a roll to a new secret a node signs with the previous one until
// every node accepts the new (UseNewSecret), and accepts both all along.
func TestSigner_SecretRoll(t *testing.T) {
	const oldSecret, newSecret = "the-old-cluster-secret-0123456789-abcdef", "the-new-cluster-secret-9876543210-zyxwvu"
	oldOnly, newOnly := mustSigner(t, oldSecret), mustSigner(t, newSecret)
	rolling, err := fencedstore.NewSigner([]byte(newSecret), []byte(oldSecret))
	if err != nil {
		t.Fatal(err)
	}
	st := fencedstore.SignedToken{Token: fencedstore.Token{Epoch: 3, Seq: 9}, Attempt: "a", Scope: fencedstore.Scope{Job: "j", Prefix: "reports/"}, Expires: expiry}
	verifies := func(s *fencedstore.Signer, text string) bool { _, err := s.Verify(text); return err == nil }
	check := func(phase string, signer *fencedstore.Signer, oldOK, newOK bool) {
		t.Helper()
		text, err := signer.Sign(st)
		if err != nil {
			t.Fatal(err)
		}
		if verifies(oldOnly, text) != oldOK || verifies(newOnly, text) != newOK || !verifies(rolling, text) {
			t.Errorf("%s: verified by old-only %v (want %v), new-only %v (want %v), rolling %v (want true)",
				phase, verifies(oldOnly, text), oldOK, verifies(newOnly, text), newOK, verifies(rolling, text))
		}
		if oldOnly.CheckCredential(signer.Credential()) != oldOK || newOnly.CheckCredential(signer.Credential()) != newOK || !rolling.CheckCredential(signer.Credential()) {
			t.Errorf("%s: the credential is not accepted as its tokens are", phase)
		}
	}
	check("rolling, before every node accepts the new secret", rolling, true, false)
	rolling.UseNewSecret(true)
	check("rolling, after", rolling, false, true)
	rolling.UseNewSecret(false)
	check("rolling, a member came back with the old secret only", rolling, true, false)
	check("old only", oldOnly, true, false)
	check("new only", newOnly, false, true)
	newOnly.UseNewSecret(false) // without a previous secret: nothing to go back to
	check("new only, told to go back", newOnly, false, true)
}
