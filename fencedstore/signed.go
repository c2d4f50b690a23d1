package fencedstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencecron/fencecron/fencedstore/keyring"
)

// Limits on the parts of a signed token's text form.
const (
	// MaxTokenTextLen bounds the whole text form; longer input is refused
	// before any parsing or hashing.
	MaxTokenTextLen = 4096
	// MaxAttemptLen bounds the attempt id carried in a token.
	MaxAttemptLen = 512
	// MinSecretLen is the shortest cluster secret NewSigner accepts.
	MinSecretLen = 32
)

// tokenVersion prefixes every signed token; a new format gets a new one.
// v1 (fencecron before tokens expired) had no expiry field; it is refused.
const (
	tokenVersion    = "v2"
	oldTokenVersion = "v1"
)

// b64 is the encoding of the attempt, scope and MAC fields: URL-safe, no
// padding, and strict, so each byte string has exactly one spelling.
var b64 = base64.RawURLEncoding.Strict()

// Scope is what a signed token may write: the job it was minted for and the
// key prefix of that job's outputs.
type Scope struct {
	Job string `json:"job"`
	// Prefix is a directory prefix ending in "/" (every key below it) or,
	// without a trailing "/", exactly one key. It is never empty: no token
	// may write every key of the store (Sign and Verify refuse one).
	Prefix string `json:"prefix"`
}

// Covers reports whether a token with scope s may write key. An empty
// prefix covers nothing, and no scope covers a key of another namespace
// than its job's (KeyNamespace, JobNamespace): a job of the default
// namespace writes no key under NamespaceKeyRoot, whatever its prefix.
func (s Scope) Covers(key string) bool {
	switch {
	case s.Prefix == "":
		return false
	case KeyNamespace(key) != JobNamespace(s.Job):
		return false
	case strings.HasSuffix(s.Prefix, "/"):
		return strings.HasPrefix(key, s.Prefix)
	}
	return key == s.Prefix
}

// SignedToken is a fence token together with what the cluster signed along
// with it: the attempt it was minted for, its scope and its expiry.
type SignedToken struct {
	Token
	Attempt string
	Scope   Scope
	// Expires is when the token stops being good; the store refuses a
	// write it decides later as expired (PublishRequest.Expires). Every
	// signed token has one, in whole seconds (Sign rounds down; Verify
	// returns it in UTC).
	Expires time.Time
}

// Signer signs and verifies the text form of tokens,
//
//	v2.<epoch>.<seq>.<expires>.<attempt>.<job>~<prefix>.<mac>
//
// where expires is Unix time in seconds, attempt, job and prefix are
// base64url (no padding), and mac is the base64url HMAC-SHA256 of everything
// before the last dot, under a key derived from the cluster secret: the MAC
// covers the expiry, so it cannot be moved. The v1 form of older versions
// had no expiry and is refused. A Signer also derives the store credential
// that nodes present as "Authorization: Bearer". It is safe for concurrent
// use.
//
// While the cluster rolls to a new secret, a Signer holds the previous one
// too: it verifies tokens and credentials of either, and signs with the
// previous one until UseNewSecret(true), when every node accepts the new.
type Signer struct {
	keys    []signerKey // the secret's, then the previous secret's if any
	current atomic.Int32
}

// signerKey is what one secret derives.
type signerKey struct {
	key        []byte
	credential string
}

// NewSigner derives the token-signing key and the store credential from the
// cluster secret (cluster.secret in the config) with the keyring, one label
// each, so neither reveals the other or the secret. A previous secret
// (cluster.previous_secret) is accepted too, and signed with until
// UseNewSecret.
func NewSigner(secret []byte, previous ...[]byte) (*Signer, error) {
	s := &Signer{}
	for _, sec := range append([][]byte{secret}, previous...) {
		if len(sec) == 0 && len(s.keys) > 0 {
			continue
		}
		if len(sec) < MinSecretLen {
			return nil, fmt.Errorf("cluster secret is %d bytes; at least %d are needed", len(sec), MinSecretLen)
		}
		key := keyring.Derive(sec, keyring.TokenSigning)
		cred := keyring.Derive(sec, keyring.StoreCredential)
		s.keys = append(s.keys, signerKey{key: key, credential: b64.EncodeToString(cred)})
	}
	s.current.Store(int32(len(s.keys) - 1))
	return s, nil
}

// UseNewSecret switches what the Signer signs with (and the credential it
// presents) to the new secret, or back to the previous one; without a
// previous secret it changes nothing.
func (s *Signer) UseNewSecret(useNew bool) {
	if useNew {
		s.current.Store(0)
	} else {
		s.current.Store(int32(len(s.keys) - 1))
	}
}

func (s *Signer) signing() signerKey { return s.keys[s.current.Load()] }

// Credential returns the store credential: the bearer secret nodes add to
// their own store requests. Job processes never see it.
func (s *Signer) Credential() string { return s.signing().credential }

// CheckCredential reports, in constant time, whether c is the store
// credential (of the secret, or of the previous one during a roll).
func (s *Signer) CheckCredential(c string) bool {
	ok := 0
	for _, k := range s.keys {
		ok |= subtle.ConstantTimeCompare([]byte(c), []byte(k.credential))
	}
	return ok == 1
}

// Sign returns the text form of st. It refuses a token that could not have
// been minted (Token.Validate), one without an expiry or with one outside
// 1970 to 9999, an empty (whole-store) scope prefix, and an over-long
// attempt or prefix.
func (s *Signer) Sign(st SignedToken) (string, error) {
	if err := st.Validate(); err != nil {
		return "", err
	}
	switch {
	case st.Expires.IsZero():
		return "", fmt.Errorf("%w: no expiry: every signed token expires", ErrBadToken)
	case st.Expires.Unix() < 1 || st.Expires.Unix() > MaxExpiresUnix:
		return "", fmt.Errorf("%w: expiry %s is out of range (1970 to 9999)", ErrBadToken, st.Expires.UTC().Format(time.RFC3339))
	case st.Scope.Prefix == "":
		return "", fmt.Errorf("%w: %s", ErrBadToken, errWholeStore)
	case len(st.Attempt) > MaxAttemptLen:
		return "", fmt.Errorf("%w: attempt id longer than %d bytes", ErrBadToken, MaxAttemptLen)
	case len(st.Scope.Prefix) > MaxKeyLen || len(st.Scope.Job) > MaxKeyLen:
		return "", fmt.Errorf("%w: scope longer than %d bytes", ErrBadToken, MaxKeyLen)
	}
	body := fmt.Sprintf("%s.%d.%d.%d.%s.%s~%s", tokenVersion, st.Epoch, st.Seq, st.Expires.Unix(),
		b64.EncodeToString([]byte(st.Attempt)),
		b64.EncodeToString([]byte(st.Scope.Job)), b64.EncodeToString([]byte(st.Scope.Prefix)))
	text := body + "." + b64.EncodeToString(s.mac(body))
	if len(text) > MaxTokenTextLen {
		return "", fmt.Errorf("%w: signed form longer than %d bytes", ErrBadToken, MaxTokenTextLen)
	}
	return text, nil
}

// errWholeStore says why a token scoped to every key is refused.
const errWholeStore = "empty scope prefix: no token may write every key of the store"

// Verify parses text and checks its signature. Every failure wraps
// ErrBadToken and says what was wrong; a forged or foreign token is told
// apart from a malformed one. It does not compare the expiry with a clock:
// the store does, when it decides the write, and records the refusal.
func (s *Signer) Verify(text string) (SignedToken, error) {
	st, body, mac, err := ParseSignedToken(text)
	if err != nil {
		return SignedToken{}, err
	}
	if !slices.ContainsFunc(s.keys, func(k signerKey) bool { return hmac.Equal(mac, macOf(k.key, body)) }) {
		return SignedToken{}, fmt.Errorf("%w: signature does not match (forged, altered, or signed with another cluster's secret)", ErrBadToken)
	}
	if err := st.Validate(); err != nil {
		return SignedToken{}, err
	}
	if st.Scope.Prefix == "" {
		return SignedToken{}, fmt.Errorf("%w: %s", ErrBadToken, errWholeStore)
	}
	return st, nil
}

func (s *Signer) mac(body string) []byte { return macOf(s.signing().key, body) }

func macOf(key []byte, body string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(body))
	return h.Sum(nil)
}

// decodeField decodes one base64url field. encoding/base64 skips CR and LF
// inside its input; they are refused here so a token has one spelling.
func decodeField(s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return nil, base64.CorruptInputError(i)
		}
	}
	return b64.DecodeString(s)
}

// errMalformed is wrapped by every syntax error of ParseSignedToken.
var errMalformed = errors.New("malformed token")

// ParseSignedToken splits a token's text form into its fields without
// checking the signature: only Signer.Verify makes a token trustworthy. It
// returns the signed part and the MAC as well. Errors wrap ErrBadToken.
func ParseSignedToken(text string) (st SignedToken, body string, mac []byte, err error) {
	bad := func(format string, args ...any) (SignedToken, string, []byte, error) {
		return SignedToken{}, "", nil, fmt.Errorf("%w: %w: %s", ErrBadToken, errMalformed, fmt.Sprintf(format, args...))
	}
	const form = tokenVersion + ".<epoch>.<seq>.<expires>.<attempt>.<scope>.<mac>"
	switch {
	case text == "":
		return bad("empty")
	case len(text) > MaxTokenTextLen:
		return bad("longer than %d bytes", MaxTokenTextLen)
	case strings.HasPrefix(text, oldTokenVersion+"."):
		return SignedToken{}, "", nil, fmt.Errorf("%w: a %s token carries no expiry: it was signed by an older fencecron, and the store takes only %s tokens, which expire (the next attempt gets one)", ErrBadToken, oldTokenVersion, tokenVersion)
	case !strings.HasPrefix(text, tokenVersion+"."):
		if _, err := ParseToken(text); err == nil {
			return SignedToken{}, "", nil, fmt.Errorf("%w: unsigned token %q: the store takes only the signed form %s (FENCECRON_TOKEN)", ErrBadToken, text, form)
		}
		return bad("does not start with %q", tokenVersion+".")
	}
	f := strings.Split(text, ".")
	switch {
	case len(f) == 6:
		return SignedToken{}, "", nil, fmt.Errorf("%w: unsigned token: no signature field", ErrBadToken)
	case len(f) != 7:
		return bad("%d dot-separated fields, want 7: %s", len(f), form)
	}
	epoch, err := parseDecimal(f[1])
	if err != nil {
		return bad("epoch %q is not a decimal number", truncate(f[1]))
	}
	seq, err := parseDecimal(f[2])
	if err != nil {
		return bad("seq %q is not a decimal number", truncate(f[2]))
	}
	expires, err := parseDecimal(f[3])
	if err != nil || expires < 1 || expires > MaxExpiresUnix {
		return bad("expiry %q is not a Unix time in seconds from 1970 to 9999", truncate(f[3]))
	}
	attempt, err := decodeField(f[4])
	if err != nil {
		return bad("attempt field is not base64url")
	}
	jobField, prefixField, ok := strings.Cut(f[5], "~")
	if !ok {
		return bad("scope field has no \"~\" between job and prefix")
	}
	job, err1 := decodeField(jobField)
	prefix, err2 := decodeField(prefixField)
	if err1 != nil || err2 != nil {
		return bad("scope field is not base64url")
	}
	if f[6] == "" {
		return SignedToken{}, "", nil, fmt.Errorf("%w: unsigned token: empty signature", ErrBadToken)
	}
	mac, err = decodeField(f[6])
	if err != nil || len(mac) != sha256.Size {
		return bad("signature is not a base64url HMAC-SHA256")
	}
	st = SignedToken{
		Token:   Token{Epoch: epoch, Seq: seq},
		Attempt: string(attempt),
		Scope:   Scope{Job: string(job), Prefix: string(prefix)},
		Expires: time.Unix(int64(expires), 0).UTC(),
	}
	return st, text[:strings.LastIndexByte(text, '.')], mac, nil
}
