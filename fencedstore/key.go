package fencedstore

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key the store accepts, in bytes.
const MaxKeyLen = 1024

// ValidateKey returns an error wrapping ErrInvalidKey unless key is a clean
// relative path: non-empty, at most MaxKeyLen bytes, valid UTF-8, no NUL or
// control characters, no leading "/", and no empty, "." or ".." segments.
func ValidateKey(key string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrInvalidKey, truncate(key), why) }
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return bad(fmt.Sprintf("longer than %d bytes", MaxKeyLen))
	case !utf8.ValidString(key):
		return bad("not valid UTF-8")
	case strings.HasPrefix(key, "/"):
		return bad("absolute path")
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return bad("control character")
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return bad("empty path segment")
		case ".", "..":
			return bad(fmt.Sprintf("%q segment", seg))
		}
	}
	return nil
}

// ValidatePrefix checks a listing prefix: empty, or a key prefix that could
// begin a valid key.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return ValidateKey(strings.TrimSuffix(prefix, "/") + "/x")
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
