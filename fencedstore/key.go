package fencedstore

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key the store accepts, in bytes.
const MaxKeyLen = 1024

// ValidateKey returns an error wrapping ErrInvalidKey unless key is a clean
// relative path: non-empty, at most MaxKeyLen bytes, valid UTF-8, no NUL or
// control characters, no leading "/", and no empty, "." or ".." segments.
// The rule is CheckKey, which job validation applies to output keys.
func ValidateKey(key string) error {
	err := CheckKey(key)
	switch {
	case err == nil:
		return nil
	case key == "":
		return fmt.Errorf("%w: %v", ErrInvalidKey, err)
	}
	return fmt.Errorf("%w %q: %v", ErrInvalidKey, truncate(key), err)
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

// CheckKey says why key is not a valid store key, or returns nil. A key is
// a clean relative path: non-empty, at most MaxKeyLen bytes, valid UTF-8,
// no NUL or control characters, no leading "/", and no empty, "." or ".."
// segments. It is the one rule for keys: the store applies it to every
// call (ValidateKey) and job validation to a job's rendered output key, so
// a job set the leader accepted never names a key the store refuses. The message does not repeat the key.
func CheckKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case len(key) > MaxKeyLen:
		return fmt.Errorf("longer than %d bytes", MaxKeyLen)
	case !utf8.ValidString(key):
		return errors.New("not valid UTF-8")
	case strings.HasPrefix(key, "/"):
		return errors.New("absolute path")
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return errors.New("control character")
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return errors.New("empty path segment")
		case ".", "..":
			return fmt.Errorf("%q segment", seg)
		}
	}
	return nil
}
