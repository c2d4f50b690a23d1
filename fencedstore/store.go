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
	"fmt"
	"time"
)

// Sentinel errors. Publish and Establish return ErrStaleOwner, ErrConflict
// and ErrExpired together with a filled-in Result: they are decisions, not
// failures.
var (
	ErrStaleOwner = errors.New("stale_owner: token is older than the key's greatest token")
	ErrConflict   = errors.New("conflict: expected version differs")
	// ErrExpired: the call's token expired before the store decided it
	// (see PublishRequest.Expires).
	ErrExpired    = errors.New("expired: the token's expiry has passed")
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
	// ErrQuota: a write that would take the keys under its token's scope
	// beyond their quota of keys or bytes.
	ErrQuota = errors.New("quota exceeded")
	// ErrInvalidJob: a RaiseFloor without a usable job name.
	ErrInvalidJob = errors.New("invalid job name")
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
	// Expired: the call's token had expired when the store decided it.
	// Like stale_owner, it changes nothing but the key's history.
	Expired Outcome = "expired"
	// Deleted: retention deleted the key (its body, versions and earlier
	// history). It is not the answer to a call: it opens the history the
	// key's tombstone keeps, and its Greatest is the token the tombstone
	// holds (see Retention).
	Deleted Outcome = "deleted"
)

// Accepted reports whether a decision with outcome o accepted the call's
// token, so that afterwards the key's greatest token is at least the
// call's: every outcome but the refusals stale_owner and expired (a
// conflict refuses the body, not the token).
func (o Outcome) Accepted() bool { return o != StaleOwner && o != Expired }

// Defaults. DefaultMaxBodyBytes is the one body cap of every store, the
// HTTP handler, `fencecron publish` and `fencecron dev`, and the default of
// the config's store.max_body_bytes; it is a job's default output cap
// (jobs.DefaultMaxOutputBytes), so that a job left at its defaults can
// always publish to a store left at its. The quotas bound what the keys
// under one job token's scope may hold (store.quota.keys,
// store.quota.bytes).
const (
	DefaultMaxBodyBytes     = 16 << 20
	DefaultHistoryRetention = 1000
	DefaultQuotaKeys        = 10000
	DefaultQuotaBytes       = 1 << 30
)

// PublishRequest asks the store to replace a key's body.
type PublishRequest struct {
	Key     string
	Token   Token
	Attempt string
	// Job is the job the token was minted for (a signed token's
	// Scope.Job). The store refuses the call as stale_owner if the job's
	// floor is at or above the token (Store.RaiseFloor). Empty: a call
	// of no job, which no floor refuses.
	Job  string
	Body []byte
	// ExpectedVersion, if set, must equal the key's current version (0 for
	// a key never written) or the publish is refused as a conflict.
	ExpectedVersion *uint64
	// Quota, if set, bounds the keys under its prefix, which must cover
	// Key: a publish that would take them beyond it fails with ErrQuota,
	// checked in the same atomic step as the write, before the rules, and
	// nothing is written or recorded. The HTTP client does not send it:
	// the store it talks to applies its own to jobs' tokens.
	Quota *Quota
	// Expires, if set, is when the token stops being good: a call the
	// store decides after it is refused as expired (by the store's own
	// clock), changes nothing, and is recorded. Zero means no expiry.
	Expires time.Time
}

// EstablishRequest asks the store to record a token as a key's greatest.
type EstablishRequest struct {
	Key     string
	Token   Token
	Attempt string
	// Job is as in PublishRequest.
	Job string
	// Quota is as in PublishRequest (an establish adds a key, no bytes).
	Quota *Quota
	// Expires is as in PublishRequest.
	Expires time.Time
}

// Result is the store's answer to Publish or Establish.
type Result struct {
	Outcome  Outcome `json:"outcome"`
	Key      string  `json:"key"`
	Version  uint64  `json:"version"`
	Greatest Token   `json:"greatest"`
	// Floor is set on a stale_owner refusal of a token its job's floor
	// revoked (see Decision.Floor): the floor that refused it.
	Floor Token `json:"floor,omitzero"`
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
	// Deleted, if set, is when retention deleted the key: the key has no
	// body, and Greatest is its tombstone, the token every later call
	// must be newer than (see DecidePublish). Listings never show it.
	Deleted time.Time `json:"deleted,omitzero"`
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
	// Expires is the call's expiry, if it carried one: an expired
	// decision is one whose Expires is before its Time.
	Expires time.Time `json:"expires,omitzero"`
	// Floor, on a stale_owner refusal, is the floor of the call's job
	// that refused it (Store.RaiseFloor) when that, not the key's
	// greatest token, is why: the token was at or below it.
	Floor Token `json:"floor,omitzero"`
}

// Store is the fenced store. Every method is safe for concurrent use, and
// Publish and Establish each decide and record in one atomic step.
//
// Every method returns ErrInvalidKey for a bad key and ErrUnavailable when
// the backend cannot be reached; Publish and Establish return ErrBadToken for
// a token that was never minted (see Token.Validate) or an expiry out of
// range (see ValidateCall), ErrExpired with a Result for a call whose
// expiry has passed, and ErrQuota for one beyond its request's Quota.
type Store interface {
	// Establish records the request's token as the key's greatest token
	// unless a newer one is there already (ErrStaleOwner). It is how a
	// worker shuts out every older attempt before it starts working.
	Establish(ctx context.Context, req EstablishRequest) (Result, error)
	// Publish applies the rules table (docs/how-it-works.md, "The store's rules"). It returns
	// ErrStaleOwner, ErrConflict or ErrExpired with a Result when it
	// refuses, ErrInvalidKey or ErrTooLarge for bad input; on any error
	// nothing but the refusal's history entry (and, for a conflict with a
	// newer token, the greatest token) changes.
	Publish(ctx context.Context, req PublishRequest) (Result, error)
	// Get returns a key's body and state, or ErrNotFound (also for a key
	// retention deleted).
	Get(ctx context.Context, key string) (Object, error)
	// List returns the state of every key with the prefix, in key order.
	List(ctx context.Context, prefix string) ([]Meta, error)
	// History returns a key's decisions, oldest first, or ErrNotFound.
	History(ctx context.Context, key string) ([]Decision, error)
	// RaiseFloor revokes every token of job up to tok: from the moment it
	// returns, every Establish and Publish whose request names job and
	// carries a token not newer than tok is refused as stale_owner, on
	// every key, and recorded in that key's history. It is how a forced
	// release stops the released attempt (and any older one of the job)
	// from writing. A floor only rises: one already at or above tok is
	// kept. It returns the job's floor after the call. It waits for the
	// calls of job already being decided, so none of them lands after it
	// returns. Errors: ErrBadToken for a token never minted,
	// ErrInvalidJob for an empty or over-long job, ErrUnavailable (the
	// floor may or may not have been raised; raising it again is safe).
	RaiseFloor(ctx context.Context, job string, tok Token) (Token, error)
}

// ValidateJob checks the job name of RaiseFloor: not empty, and at most
// MaxKeyLen bytes, as a signed token's scope carries it.
func ValidateJob(job string) error {
	switch {
	case job == "":
		return fmt.Errorf("%w: empty", ErrInvalidJob)
	case len(job) > MaxKeyLen:
		return fmt.Errorf("%w: %q is longer than %d bytes", ErrInvalidJob, truncate(job), MaxKeyLen)
	}
	return nil
}

// ValidateFloor checks a RaiseFloor call: its job (ValidateJob) and a
// token that could have been minted (Token.Validate).
func ValidateFloor(job string, tok Token) error {
	if err := ValidateJob(job); err != nil {
		return err
	}
	return tok.Validate()
}

// RaiseTo is the rule of RaiseFloor: the floor after raising cur to tok.
func RaiseTo(cur, tok Token) Token {
	if cur.Less(tok) {
		return tok
	}
	return cur
}

// Hash returns the content hash the store records for body.
func Hash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// ValidateCall checks what every Publish and Establish must carry before
// the rules look at it: a valid key, a token that could have been minted,
// and an expiry, if any, that every backend and the history's JSON can
// hold (from 1970 to the end of year 9999). Errors wrap ErrInvalidKey or
// ErrBadToken.
func ValidateCall(key string, tok Token, expires time.Time) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := tok.Validate(); err != nil {
		return err
	}
	if !expires.IsZero() && (expires.Unix() < 1 || expires.Unix() > MaxExpiresUnix) {
		return fmt.Errorf("%w: expiry %s is out of range (1970 to 9999)", ErrBadToken, expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// MaxExpiresUnix is the latest expiry a call or signed token may carry, in
// Unix seconds: the end of year 9999, the last instant JSON times can hold.
const MaxExpiresUnix = 253402300799

// expired reports whether a call with this expiry is too late at now.
func expired(expires, now time.Time) bool { return !expires.IsZero() && expires.Before(now) }

// DecideEstablish applies the establish row of the rules table to m, for
// a request whose job's floor is floor (zero: none). A request whose
// expiry is before now is refused as expired first, and changes nothing;
// then one whose token its job's floor revoked is refused as stale_owner,
// whatever the key holds.
func DecideEstablish(m Meta, floor Token, req EstablishRequest, now time.Time) (Meta, Decision) {
	d := Decision{Token: req.Token, Attempt: req.Attempt, Time: now, Greatest: m.Greatest, Version: m.Version, Expires: req.Expires}
	switch {
	case expired(req.Expires, now):
		d.Outcome = Expired
		return m, d
	case revoked(floor, req.Token):
		d.Outcome, d.Floor = StaleOwner, floor
		return m, d
	case req.Token.Less(m.Greatest), buried(m, req.Token):
		d.Outcome = StaleOwner
		return m, d
	}
	m = revive(m)
	m.Greatest = req.Token
	d.Outcome = Established
	return m, d
}

// DecidePublish applies the publish rows of the rules table to m, for a body
// whose Hash is hash and a request whose job's floor is floor (zero:
// none). It returns the key's next state and the decision; Outcome
// Applied with a changed Version means the body must be written. A
// request whose expiry is before now is refused as expired before any
// row is looked at, and changes nothing: an expired token is no longer a
// credential, whatever its order. Nor is one its job's floor revoked:
// it is refused as stale_owner next, and changes nothing.
func DecidePublish(m Meta, floor Token, req PublishRequest, hash string, now time.Time) (Meta, Decision) {
	d := Decision{Token: req.Token, Attempt: req.Attempt, Time: now, Greatest: m.Greatest, Hash: hash, Expires: req.Expires}
	if expired(req.Expires, now) {
		d.Outcome, d.Version = Expired, m.Version
		return m, d
	}
	if revoked(floor, req.Token) {
		d.Outcome, d.Version, d.Floor = StaleOwner, m.Version, floor
		return m, d
	}
	if buried(m, req.Token) {
		d.Outcome, d.Version = StaleOwner, m.Version
		return m, d
	}
	m = revive(m)
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

// revoked reports whether a job's floor refuses tok: every token of the
// job at or below it was revoked (Store.RaiseFloor).
func revoked(floor, tok Token) bool { return !floor.IsZero() && tok.Compare(floor) <= 0 }

// buried reports whether m is a tombstone (a key retention deleted) that
// tok cannot bring back: only a token newer than the tombstone's may. An
// equal one is refused too, unlike on a live key: the attempt that holds
// it wrote or established the key before it was deleted, and letting it
// write again would resurrect what retention removed.
func buried(m Meta, tok Token) bool {
	return !m.Deleted.IsZero() && tok.Compare(m.Greatest) <= 0
}

// revive turns a tombstone that a newer token has reached into the state
// of a key never written, keeping only its greatest token: the key is
// created again from version 0, as if new.
func revive(m Meta) Meta {
	if m.Deleted.IsZero() {
		return m
	}
	return Meta{Key: m.Key, Greatest: m.Greatest}
}

// DecideDelete is what retention does to a key: its body is gone and it
// becomes a tombstone that keeps its greatest token, deleted at now. The
// decision opens the tombstone's history.
func DecideDelete(m Meta, now time.Time) (Meta, Decision) {
	t := Meta{Key: m.Key, Greatest: m.Greatest, Deleted: now}
	return t, Decision{Outcome: Deleted, Token: m.Greatest, Greatest: m.Greatest, Version: 0, Time: now}
}

// Err returns the error Publish and Establish report for a decision.
func (d Decision) Err() error {
	switch d.Outcome {
	case StaleOwner:
		if !d.Floor.IsZero() {
			return &RevokedError{Floor: d.Floor}
		}
		return ErrStaleOwner
	case Conflict:
		return ErrConflict
	case Expired:
		return ErrExpired
	}
	return nil
}

// RevokedError is the stale_owner refusal of a token its job's floor
// revoked (Store.RaiseFloor): it was at or below Floor. It wraps
// ErrStaleOwner.
type RevokedError struct {
	Floor Token
}

func (e *RevokedError) Error() string {
	return fmt.Sprintf("stale_owner: the token is at or below its job's floor %s: a forced release revoked it", e.Floor)
}

// Unwrap returns ErrStaleOwner.
func (e *RevokedError) Unwrap() error { return ErrStaleOwner }

// ErrOf is Decision.Err for a Result: the error a decided call returns.
func ErrOf(res Result) error {
	return Decision{Outcome: res.Outcome, Floor: res.Floor}.Err()
}

// IsDecision reports whether err from Publish or Establish is a refusal the
// store decided and recorded (ErrStaleOwner, ErrConflict or ErrExpired), as
// opposed to a failure.
func IsDecision(err error) bool {
	return errors.Is(err, ErrStaleOwner) || errors.Is(err, ErrConflict) || errors.Is(err, ErrExpired)
}
