package fencedstore

import (
	"cmp"
	"fmt"
)

// Token is a fence token: the epoch (Raft term) and seq (Raft log index) of
// the grant that minted it. Tokens compare lexicographically; the zero token
// is older than every minted one.
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
func (t Token) String() string { return fmt.Sprintf("%d.%d", t.Epoch, t.Seq) }
