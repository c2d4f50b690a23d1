package fencedstore_test

import (
	"errors"
	"path"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fencecron/fencecron/fencedstore"
)

// FuzzVerify feeds arbitrary text to the token parser and verifier. Nothing
// may panic; every refusal is ErrBadToken; and whatever verifies must be
// exactly what the signer writes for the same fields (one spelling per
// token, so a verified token cannot be altered and still verify).
func FuzzVerify(f *testing.F) {
	s := mustSigner(f, testSecret)
	for _, st := range []fencedstore.SignedToken{
		{Token: fencedstore.Token{Epoch: 1, Seq: 1}, Scope: fencedstore.Scope{Prefix: "k"}, Expires: time.Unix(1, 0).UTC()},
		{Token: fencedstore.Token{Epoch: 7, Seq: 1042}, Attempt: "report@20260701T090000Z.1", Scope: fencedstore.Scope{Job: "report", Prefix: "reports/"}, Expires: expiry},
		{Token: fencedstore.Token{Epoch: 1<<63 - 1, Seq: 1<<63 - 1}, Attempt: "ü/ä", Scope: fencedstore.Scope{Prefix: "x"}, Expires: time.Unix(fencedstore.MaxExpiresUnix, 0).UTC()},
	} {
		text, err := s.Sign(st)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(text)
		f.Add(strings.Replace(text, "v2.", "v2.9", 1))
		f.Add(strings.Replace(text, "v2.", "v1.", 1))
		f.Add(text[:len(text)-1])
	}
	for _, seed := range []string{"", "1.1", "v1", "v2", "v2......", "v2.1.1.1.~.", "v2.1.1.1.YQ.~.AAAA", "v2.0.0.0.~.", "v2.1.1.1.=.~.x",
		"v1.1.1.YQ.~.AAAA", "v2.1.1.253402300800.YQ.~eA.AAAA", "v2.1.1.01.YQ.~eA.AAAA"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		st, body, mac, perr := fencedstore.ParseSignedToken(text)
		if perr != nil {
			if !errors.Is(perr, fencedstore.ErrBadToken) {
				t.Fatalf("parse %q: err = %v, not ErrBadToken", text, perr)
			}
		} else if body+"."+b64(mac) != text {
			t.Fatalf("parse %q: body %q and mac do not rebuild the text", text, body)
		}
		got, err := s.Verify(text)
		if err != nil {
			if !errors.Is(err, fencedstore.ErrBadToken) {
				t.Fatalf("verify %q: err = %v, not ErrBadToken", text, err)
			}
			return
		}
		if perr != nil || got != st {
			t.Fatalf("verify %q = %+v, but parse said %+v, %v", text, got, st, perr)
		}
		again, err := s.Sign(got)
		if err != nil || again != text {
			t.Fatalf("verified %q but signing its fields gives %q, %v", text, again, err)
		}
	})
}

// FuzzSign signs arbitrary fields: whatever Sign accepts, Verify returns
// unchanged, and no other secret verifies it. Sign never accepts an empty
// scope, an expiry out of range, or a token out of range.
func FuzzSign(f *testing.F) {
	s := mustSigner(f, testSecret)
	other := mustSigner(f, testSecret+"-other")
	f.Add(uint64(1), uint64(1), int64(1), "", "", "")
	f.Add(uint64(1), uint64(1), int64(1), "", "", "k")
	f.Add(uint64(7), uint64(1042), int64(1782897150), "report@x.1", "report", "reports/")
	f.Add(uint64(0), uint64(5), int64(1782897150), "a.b~c", "~", ".")
	f.Add(uint64(1<<63), uint64(1), int64(1782897150), "a", "b", "c")
	f.Add(uint64(1<<63-1), uint64(1<<63-1), int64(fencedstore.MaxExpiresUnix), "a", "b", "c")
	f.Add(uint64(3), uint64(3), int64(fencedstore.MaxExpiresUnix+1), "a", "b", "c")
	f.Add(uint64(3), uint64(3), int64(0), "a", "b", "c")
	f.Fuzz(func(t *testing.T, epoch, seq uint64, expires int64, attempt, job, prefix string) {
		st := fencedstore.SignedToken{Token: fencedstore.Token{Epoch: epoch, Seq: seq}, Attempt: attempt, Scope: fencedstore.Scope{Job: job, Prefix: prefix}, Expires: time.Unix(expires, 0).UTC()}
		text, err := s.Sign(st)
		if err != nil {
			if !errors.Is(err, fencedstore.ErrBadToken) {
				t.Fatalf("sign %+v: err = %v, not ErrBadToken", st, err)
			}
			return
		}
		if prefix == "" || expires < 1 || expires > fencedstore.MaxExpiresUnix || st.Validate() != nil {
			t.Fatalf("signed %+v", st)
		}
		got, err := s.Verify(text)
		if err != nil || got != st {
			t.Fatalf("verify(sign(%+v)) = %+v, %v", st, got, err)
		}
		if _, err := other.Verify(text); !errors.Is(err, fencedstore.ErrBadToken) {
			t.Fatalf("another secret verified %q: %v", text, err)
		}
	})
}

// FuzzValidateKey checks that every accepted key is a clean relative path
// within the limits, and that every refusal is ErrInvalidKey.
func FuzzValidateKey(f *testing.F) {
	for _, seed := range []string{"reports/2026-07.csv", "a", "", "/abs", "a/../b", "..", ".", "a//b", "a/", "a/./b",
		"bad\x00nul", "tab\tkey", "\xff", "ü/ö.csv", "a b/c%2F", strings.Repeat("k", fencedstore.MaxKeyLen), strings.Repeat("k", fencedstore.MaxKeyLen+1)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := fencedstore.ValidateKey(key)
		if err != nil {
			if !errors.Is(err, fencedstore.ErrInvalidKey) {
				t.Fatalf("ValidateKey(%q) = %v, not ErrInvalidKey", key, err)
			}
			return
		}
		switch {
		case key == "" || len(key) > fencedstore.MaxKeyLen:
			t.Fatalf("accepted %q of length %d", key, len(key))
		case !utf8.ValidString(key):
			t.Fatalf("accepted invalid UTF-8 %q", key)
		case path.IsAbs(key) || path.Clean(key) != key || key == "." || strings.HasPrefix(key, "../") || key == "..":
			t.Fatalf("accepted unclean path %q", key)
		case strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			t.Fatalf("accepted control character in %q", key)
		}
		for seg := range strings.SplitSeq(key, "/") {
			if seg == ".." {
				t.Fatalf("accepted %q with a .. segment", key)
			}
		}
		if err := fencedstore.ValidatePrefix(key + "/"); err != nil && len(key)+2 <= fencedstore.MaxKeyLen {
			t.Fatalf("key %q is valid but %q is not a valid prefix: %v", key, key+"/", err)
		}
	})
}
