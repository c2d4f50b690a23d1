package fencedstore

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
)

// Token is a fence token: the epoch (Raft term) and seq (Raft log index) of
// the grant that minted it. Tokens compare lexicographically; the zero token
// is older than every minted one.
//
// Range: a minted token's epoch and seq are each in [1, 2^63-1]
// (math.MaxInt64). Raft terms and indexes start at 1, and 2^63-1 is the
// largest value every backend stores exactly (PostgreSQL's bigint). The
// signer, every store and the FSM that mints tokens refuse anything outside
// it (Validate), so a token no store could hold is never handed out.
type Token struct {
	Epoch uint64 `json:"epoch"`
	Seq   uint64 `json:"seq"`
}

// Compare returns -1, 0 or +1 as t is older than, equal to or newer than u.
func (t Token) Compare(u Token) int {
	if c := cmp.Compare(t.Epoch, u.Epoch); c != 0 {
		return c
	}
	return cmp.Compare(t.Seq, u.Seq)
}

// Less reports whether t is older than u.
func (t Token) Less(u Token) bool { return t.Compare(u) < 0 }

// IsZero reports whether t is the zero token.
func (t Token) IsZero() bool { return t == Token{} }

// String returns "epoch.seq".
func (t Token) String() string {
	return strconv.FormatUint(t.Epoch, 10) + "." + strconv.FormatUint(t.Seq, 10)
}

// LogValue writes a token in a log line as everything else shows it,
// epoch.seq, in JSON logs too.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

// Validate returns an error wrapping ErrBadToken unless t could have been
// minted: epoch and seq both at least 1 (Raft terms and log indexes start at
// 1) and both at most math.MaxInt64, the range every backend stores exactly.
func (t Token) Validate() error {
	switch {
	case t.Epoch == 0 || t.Seq == 0:
		return fmt.Errorf("%w: %s was never minted (epoch and seq start at 1)", ErrBadToken, t)
	case t.Epoch > math.MaxInt64 || t.Seq > math.MaxInt64:
		return fmt.Errorf("%w: %s is out of range (epoch and seq are at most %d)", ErrBadToken, t, int64(math.MaxInt64))
	}
	return nil
}

// ParseToken reads the plain "epoch.seq" form that Token.String writes.
// It checks syntax only; use Validate for the range.
func ParseToken(s string) (Token, error) {
	e, q, ok := strings.Cut(s, ".")
	if !ok {
		return Token{}, fmt.Errorf("%w: %q is not epoch.seq", ErrBadToken, truncate(s))
	}
	epoch, err1 := parseDecimal(e)
	seq, err2 := parseDecimal(q)
	if err1 != nil || err2 != nil {
		return Token{}, fmt.Errorf("%w: %q is not epoch.seq", ErrBadToken, truncate(s))
	}
	return Token{Epoch: epoch, Seq: seq}, nil
}

// parseDecimal accepts only the canonical decimal form of a uint64: digits,
// no sign, no leading zeros. One number has one spelling.
func parseDecimal(s string) (uint64, error) {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, strconv.ErrSyntax
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, strconv.ErrSyntax
		}
	}
	return strconv.ParseUint(s, 10, 64)
}
