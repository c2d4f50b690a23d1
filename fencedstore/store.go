// Package fencedstore is the data plane: a key-value store for job outputs
// that refuses any write carrying a fence token older than one it has already
// accepted or established for that key. Whatever schedulers and workers
// believe, this check is the last word.
package fencedstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"
)

// Sentinel errors. Publish and Establish return ErrStaleOwner and ErrConflict
// together with a filled-in Result: they are decisions, not failures.
var (
	ErrStaleOwner = errors.New("stale_owner: token is older than the key's greatest token")
	ErrConflict   = errors.New("conflict: expected version differs")
	ErrNotFound   = errors.New("key not found")
	ErrInvalidKey = errors.New("invalid key")
	ErrTooLarge   = errors.New("body too large")
	ErrBadToken   = errors.New("bad token")
	ErrClosed     = errors.New("store closed")
	// ErrUnauthorized: a write without valid credentials (a missing token,
	// or a wrong cluster credential).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrOutOfScope: a signed token used on a key outside its scope.
	ErrOutOfScope = errors.New("key outside the token's scope")
	// ErrUnavailable: the backend cannot be reached. For Publish and
	// Establish the outcome is then unknown; repeating the same call (same
	// token, attempt and body) is safe, because an applied publish repeated
	// is applied again without change.
	ErrUnavailable = errors.New("store unavailable")
)

// Outcome names a decision of the store.
type Outcome string

// Outcomes recorded in a key's history.
const (
	Applied     Outcome = "applied"
	StaleOwner  Outcome = "stale_owner"
	Conflict    Outcome = "conflict"
	Established Outcome = "established"
)

// Defaults.
const (
	DefaultMaxBodyBytes     = 64 << 20
	DefaultHistoryRetention = 1000
)

// PublishRequest asks the store to replace a key's body.
type PublishRequest struct {
	Key     string
	Token   Token
	Attempt string
	Body    []byte
	// ExpectedVersion, if set, must equal the key's current version (0 for
	// a key never written) or the publish is refused as a conflict.
	ExpectedVersion *uint64
}

// Result is the store's answer to Publish or Establish.
type Result struct {
	Outcome  Outcome `json:"outcome"`
	Key      string  `json:"key"`
	Version  uint64  `json:"version"`
	Greatest Token   `json:"greatest"`
}

// Meta is the state the rules look at for one key.
type Meta struct {
	Key      string    `json:"key"`
	Version  uint64    `json:"version"`
	Greatest Token     `json:"greatest"`
	Token    Token     `json:"token"`   // token of the write that made the current body
	Attempt  string    `json:"attempt"` // attempt that made the current body
	Hash     string    `json:"hash"`    // sha256 of the current body, hex
	Size     int64     `json:"size"`
	Updated  time.Time `json:"updated,omitzero"`
}

// Object is a key's current body and state.
type Object struct {
	Meta
	Body []byte `json:"-"`
}

// Decision is one entry of a key's history.
type Decision struct {
	Outcome Outcome   `json:"outcome"`
	Token   Token     `json:"token"`
	Attempt string    `json:"attempt,omitempty"`
	Version uint64    `json:"version"` // the key's version after the decision
	Time    time.Time `json:"time"`
	// Greatest is the key's greatest token when the call arrived; for a
	// refusal it is the token that made the caller stale.
	Greatest Token  `json:"greatest"`
	Hash     string `json:"hash,omitempty"`
}

// Store is the fenced store. Every method is safe for concurrent use, and
// Publish and Establish each decide and record in one atomic step.
//
// Every method returns ErrInvalidKey for a bad key and ErrUnavailable when
// the backend cannot be reached; Publish and Establish return ErrBadToken for
// a token that was never minted (see Token.Validate).
type Store interface {
	// Establish records tok as the key's greatest token unless a newer one
	// is there already (ErrStaleOwner). It is how a worker shuts out every
	// older attempt before it starts working.
	Establish(ctx context.Context, key string, tok Token, attempt string) (Result, error)
	// Publish applies the rules table of DESIGN.md. It returns ErrStaleOwner
	// or ErrConflict with a Result when it refuses, ErrInvalidKey or
	// ErrTooLarge for bad input; on any error nothing but the refusal's
	// history entry (and, for a conflict with a newer token, the greatest
	// token) changes.
	Publish(ctx context.Context, req PublishRequest) (Result, error)
	// Get returns a key's body and state, or ErrNotFound.
	Get(ctx context.Context, key string) (Object, error)
	// List returns the state of every key with the prefix, in key order.
	List(ctx context.Context, prefix string) ([]Meta, error)
	// History returns a key's decisions, oldest first, or ErrNotFound.
	History(ctx context.Context, key string) ([]Decision, error)
}

// Hash returns the content hash the store records for body.
func Hash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// DecideEstablish applies the establish row of the rules table to m.
func DecideEstablish(m Meta, tok Token, attempt string, now time.Time) (Meta, Decision) {
	d := Decision{Token: tok, Attempt: attempt, Time: now, Greatest: m.Greatest, Version: m.Version}
	if tok.Less(m.Greatest) {
		d.Outcome = StaleOwner
		return m, d
	}
	m.Greatest = tok
	d.Outcome = Established
	return m, d
}

// DecidePublish applies the publish rows of the rules table to m, for a body
// whose Hash is hash. It returns the key's next state and the decision;
// Outcome Applied with a changed Version means the body must be written.
func DecidePublish(m Meta, req PublishRequest, hash string, now time.Time) (Meta, Decision) {
	d := Decision{Token: req.Token, Attempt: req.Attempt, Time: now, Greatest: m.Greatest, Hash: hash}
	switch c := req.Token.Compare(m.Greatest); {
	case c < 0:
		d.Outcome, d.Version = StaleOwner, m.Version
		return m, d
	case c > 0:
		m.Greatest = req.Token
	default:
		// The same attempt sending the same body again: its earlier call
		// was applied, so this one is too, and nothing changes.
		if m.Version > 0 && m.Token == req.Token && m.Attempt == req.Attempt && m.Hash == hash {
			d.Outcome, d.Version = Applied, m.Version
			return m, d
		}
	}
	if req.ExpectedVersion != nil && *req.ExpectedVersion != m.Version {
		d.Outcome, d.Version = Conflict, m.Version
		return m, d
	}
	m.Version++
	m.Token, m.Attempt, m.Hash = req.Token, req.Attempt, hash
	m.Size = int64(len(req.Body))
	m.Updated = now
	d.Outcome, d.Version = Applied, m.Version
	return m, d
}

// Err returns the error Publish and Establish report for a decision.
func (d Decision) Err() error {
	switch d.Outcome {
	case StaleOwner:
		return ErrStaleOwner
	case Conflict:
		return ErrConflict
	}
	return nil
}

// IsDecision reports whether err from Publish or Establish is a refusal the
// store decided and recorded (ErrStaleOwner or ErrConflict), as opposed to
// a failure.
func IsDecision(err error) bool {
	return errors.Is(err, ErrStaleOwner) || errors.Is(err, ErrConflict)
}
