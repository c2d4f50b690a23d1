package config

import (
	"fmt"
	"io/fs"
	"regexp"
	"strings"
)

// Rules for secrets (cluster.secret, api.token, `fencecron dev
// -api-token`). Length alone is not enough: a 32-byte run of one letter
// or "abcd" repeated passes a length check and is guessed at once, and
// such values are exactly what people type when a check is in their way.
const (
	// MinSecretDistinct is the fewest distinct bytes a secret may hold.
	MinSecretDistinct = 8
)

// CheckSecret says why s is too weak to be a cluster secret or an API
// token, or returns nil. It refuses a value shorter than MinSecretLength
// bytes, one with fewer than MinSecretDistinct distinct bytes, and one
// that is a short pattern repeated: the same unit (at most half of s)
// over and over, or a run with fewer than MinSecretDistinct different
// steps from one byte to the next (abcdef..., 02468...). The message
// says what was wrong and how to make a good one; it never contains s.
func CheckSecret(s string) error {
	const hint = "generate one with: openssl rand -hex 32"
	if len(s) < MinSecretLength {
		return fmt.Errorf("%d bytes: want at least %d (%s)", len(s), MinSecretLength, hint)
	}
	var seen [256]bool
	distinct := 0
	for i := 0; i < len(s); i++ {
		if !seen[s[i]] {
			seen[s[i]] = true
			distinct++
		}
	}
	if distinct < MinSecretDistinct {
		return fmt.Errorf("only %d distinct bytes: want at least %d; this is too easy to guess (%s)", distinct, MinSecretDistinct, hint)
	}
	if p := period([]byte(s)); p*2 <= len(s) {
		return fmt.Errorf("a %d-byte pattern repeated: too easy to guess (%s)", p, hint)
	}
	var stepSeen [256]bool
	steps := 0
	for i := 1; i < len(s); i++ {
		if d := s[i] - s[i-1]; !stepSeen[d] {
			stepSeen[d] = true
			steps++
		}
	}
	if steps < MinSecretDistinct {
		return fmt.Errorf("too regular: only %d different steps from one byte to the next (a run like abcdef...): too easy to guess (%s)", steps, hint)
	}
	return nil
}

// period returns the smallest p > 0 such that b[i] == b[i-p] for every
// i >= p (len(b) if there is none shorter).
func period(b []byte) int {
	// The prefix function of Knuth-Morris-Pratt: the longest proper
	// border of b is len(b) - period.
	if len(b) == 0 {
		return 0
	}
	border := make([]int, len(b))
	for i := 1; i < len(b); i++ {
		k := border[i-1]
		for k > 0 && b[i] != b[k] {
			k = border[k-1]
		}
		if b[i] == b[k] {
			k++
		}
		border[i] = k
	}
	return len(b) - border[len(b)-1]
}

// literalSecret reports whether a secret's YAML text holds anything
// besides ${NAME} references: that part of the secret is in the file.
func literalSecret(raw string) bool {
	return strings.TrimSpace(anyEnvRef.ReplaceAllString(raw, "")) != ""
}

var anyEnvRef = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*\}`)

// readableByOthers reports whether a file mode lets the group or others
// read the file.
func readableByOthers(m fs.FileMode) bool { return m.Perm()&0o044 != 0 }
