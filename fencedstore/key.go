package fencedstore

import (
	"fmt"
	"strings"

	"github.com/fencecron/fencecron/jobs"
)

// MaxKeyLen is the longest key the store accepts, in bytes.
const MaxKeyLen = jobs.MaxKeyLen

// ValidateKey returns an error wrapping ErrInvalidKey unless key is a clean
// relative path: non-empty, at most MaxKeyLen bytes, valid UTF-8, no NUL or
// control characters, no leading "/", and no empty, "." or ".." segments.
// The rule is jobs.CheckKey, which job validation applies to output keys.
func ValidateKey(key string) error {
	err := jobs.CheckKey(key)
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
