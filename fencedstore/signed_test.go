package fencedstore_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

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

func TestSigner_RoundTrip(t *testing.T) {
	s := mustSigner(t, testSecret)
	want := fencedstore.SignedToken{
		Token:   fencedstore.Token{Epoch: 7, Seq: 1042},
		Attempt: "monthly-report@20260701T090000Z.2",
		Scope:   fencedstore.Scope{Job: "monthly-report", Prefix: "reports/"},
	}
	text, err := s.Sign(want)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text, "v1.7.1042.") || strings.Count(text, ".") != 5 {
		t.Errorf("text form = %q, want v1.7.1042.<attempt>.<scope>.<mac>", text)
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
}

func TestSigner_Refuses(t *testing.T) {
	s := mustSigner(t, testSecret)
	other := mustSigner(t, "another-cluster-secret-entirely-unrelated")
	st := fencedstore.SignedToken{Token: fencedstore.Token{Epoch: 3, Seq: 9}, Attempt: "a", Scope: fencedstore.Scope{Job: "j", Prefix: "reports/"}}
	good, err := s.Sign(st)
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := other.Sign(st)
	// A forged epoch: take a good token and raise its epoch.
	forgedEpoch := strings.Replace(good, "v1.3.9.", "v1.999999.9.", 1)
	// A forged scope: re-use the MAC with a wider prefix.
	f := strings.Split(good, ".")
	wider, _ := other.Sign(fencedstore.SignedToken{Token: st.Token, Attempt: "a", Scope: fencedstore.Scope{Job: "j"}})
	forgedScope := strings.Join(append(f[:4:4], strings.Split(wider, ".")[4], f[5]), ".")
	// A flipped bit in the MAC.
	mac := []byte(f[5])
	mac[0] ^= 1
	flipped := strings.Join(append(f[:5:5], string(mac)), ".")

	cases := []struct {
		name, text, why string
	}{
		{"empty", "", "empty"},
		{"plain epoch.seq", "3.9", "unsigned"},
		{"no mac field", strings.Join(f[:5], "."), "unsigned"},
		{"empty mac", strings.Join(f[:5], ".") + ".", "unsigned"},
		{"other version", "v2" + good[2:], "does not start"},
		{"too many fields", good + ".x", "fields"},
		{"leading zero epoch", strings.Replace(good, "v1.3.", "v1.03.", 1), "epoch"},
		{"signed epoch", strings.Replace(good, "v1.3.", "v1.+3.", 1), "epoch"},
		{"huge seq", strings.Replace(good, ".9.", ".99999999999999999999999.", 1), "seq"},
		{"padded base64", strings.Replace(good, "."+f[3]+".", "."+f[3]+"=.", 1), "attempt"},
		{"no scope separator", strings.Replace(good, "~", "", 1), "scope"},
		{"short mac", strings.Join(append(f[:5:5], "AAAA"), "."), "signature is not"},
		{"forged epoch", forgedEpoch, "does not match"},
		{"forged scope", forgedScope, "does not match"},
		{"flipped mac bit", flipped, ""},
		{"other cluster", foreign, "does not match"},
		{"too long", "v1." + strings.Repeat("1", fencedstore.MaxTokenTextLen), "longer"},
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

	for _, tok := range []fencedstore.Token{{}, {Epoch: 1}, {Seq: 1}, {Epoch: 1 << 63, Seq: 1}, {Epoch: 1, Seq: 1 << 63}} {
		if _, err := s.Sign(fencedstore.SignedToken{Token: tok}); !errors.Is(err, fencedstore.ErrBadToken) {
			t.Errorf("sign %s: err = %v, want ErrBadToken", tok, err)
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
		{"", "anything/at/all", true},
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
