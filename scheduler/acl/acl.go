// Package acl is access control as pure functions: policies (what each
// grants, per namespace glob), tokens (kept as sha256 hashes of their
// secrets, never the secret), the replicated ACL state, and the decision
// of every change to it (Decide), which FSM.Apply calls. It does no I/O
// and reads no clock: callers pass the time.
package acl

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Errors. Each one that answers a request names its problem in the text
// that wraps it; web maps them to HTTP codes in one place.
var (
	ErrUnknownCapability   = errors.New("unknown capability")
	ErrBadNamespaceGlob    = errors.New("bad namespace glob")
	ErrBadPolicy           = errors.New("bad policy")
	ErrUnknownPolicy       = errors.New("unknown policy")
	ErrUnknownToken        = errors.New("unknown token")
	ErrUnknownAccessor     = errors.New("no token with that accessor")
	ErrAlreadyRevoked      = errors.New("token already revoked")
	ErrRevokedToken        = errors.New("revoked token")
	ErrExpiredToken        = errors.New("expired token")
	ErrBadToken            = errors.New("bad token")
	ErrAlreadyBootstrapped = errors.New("ACL system already bootstrapped")
	ErrNotBootstrapped     = errors.New("ACL system not bootstrapped")
	ErrBadAction           = errors.New("unknown ACL action")
	// ErrRepeated refuses a change the state shows was made by this very
	// change (Decide): a request the leader applied, sent again after
	// its answer was lost. The one who sent it takes it as done.
	ErrRepeated = errors.New("ACL change already applied")
)

// Capability is one thing a policy may grant.
type Capability string

// Capabilities granted per namespace.
const (
	CapRead       Capability = "read"
	CapTrigger    Capability = "trigger"
	CapPause      Capability = "pause"
	CapApply      Capability = "apply"
	CapRelease    Capability = "release"
	CapBackfill   Capability = "backfill"
	CapReadStore  Capability = "read-store"
	CapWriteStore Capability = "write-store"
)

// Capabilities granted cluster-wide, by a policy's flags rather than its
// rules.
const (
	// CapOperator: snapshots, Raft peers, restore.
	CapOperator Capability = "operator"
	// CapManagement: policies and tokens; a management identity holds
	// every capability in every namespace.
	CapManagement Capability = "management"
	// CapNone marks a route any caller may use (health, login, the
	// static files): a row of the route table, never granted.
	CapNone Capability = "none"
)

// NamespaceCapabilities are the capabilities a rule may grant, in order.
var NamespaceCapabilities = []Capability{CapRead, CapTrigger, CapPause, CapApply, CapRelease, CapBackfill, CapReadStore, CapWriteStore}

// Global says whether c is granted cluster-wide rather than per namespace.
func (c Capability) Global() bool { return c == CapOperator || c == CapManagement }

// Valid says whether c is a capability a rule may name.
func (c Capability) Valid() bool { return slices.Contains(NamespaceCapabilities, c) }

// Limits.
const (
	MaxNameLen  = 64
	MaxRules    = 64
	MaxPolicies = 1000
	MaxTokens   = 10000
	// MaxRevoked bounds the revoked tokens remembered, so that their use
	// is answered "revoked"; past it the oldest are forgotten (their use
	// is then answered "unknown").
	MaxRevoked = 1000
	// SecretBytes is the random part of a secret.
	SecretBytes = 32
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// ValidName says whether s can name a policy or a token.
func ValidName(s string) bool { return len(s) <= MaxNameLen && nameRE.MatchString(s) }

// globRE is what a namespace glob may hold: namespace characters and the
// glob's own.
var globRE = regexp.MustCompile(`^[a-z0-9*?\[\]^!-]+$`)

// ValidGlob says why glob cannot match namespaces, or nil: a path.Match
// pattern of namespace characters (lowercase letters, digits, '-') and
// '*', '?', '[...]'.
func ValidGlob(glob string) error {
	if glob == "" || len(glob) > 64 || !globRE.MatchString(glob) {
		return fmt.Errorf("%w %q: lowercase letters, digits, '-', '*', '?' and [...] only", ErrBadNamespaceGlob, clip(glob))
	}
	if _, err := path.Match(glob, ""); err != nil {
		return fmt.Errorf("%w %q: %v", ErrBadNamespaceGlob, clip(glob), err)
	}
	return nil
}

// MatchNamespace says whether glob matches namespace ns.
func MatchNamespace(glob, ns string) bool {
	ok, err := path.Match(glob, ns)
	return err == nil && ok
}

// MatchAny says whether ns matches one of globs.
func MatchAny(globs []string, ns string) bool {
	return slices.ContainsFunc(globs, func(g string) bool { return MatchNamespace(g, ns) })
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Rule grants capabilities in the namespaces its glob matches.
type Rule struct {
	Namespace    string       `json:"namespace" yaml:"namespace"`
	Capabilities []Capability `json:"capabilities" yaml:"capabilities"`
}

// Policy is a named set of grants.
type Policy struct {
	Name  string `json:"name" yaml:"name,omitempty"`
	Rules []Rule `json:"rules" yaml:"rules"`
	// Operator grants CapOperator, Management CapManagement (and so
	// everything).
	Operator   bool `json:"operator,omitempty" yaml:"operator,omitempty"`
	Management bool `json:"management,omitempty" yaml:"management,omitempty"`
	// ModifiedAt is when it was last applied.
	ModifiedAt time.Time `json:"modified_at,omitzero" yaml:"-"`
}

// ParsePolicy reads a policy body (YAML or JSON) for the policy named
// name, and validates it. A body that names another policy is refused.
func ParsePolicy(name string, body []byte) (Policy, error) {
	var p Policy
	dec := yaml.NewDecoder(strings.NewReader(string(body)))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("%w %s: %v", ErrBadPolicy, clip(name), err)
	}
	if p.Name != "" && p.Name != name {
		return Policy{}, fmt.Errorf("%w %s: the body names policy %q", ErrBadPolicy, clip(name), clip(p.Name))
	}
	p.Name = name
	return p, p.Validate()
}

// Validate says what is wrong with p, naming the rule, or nil.
func (p Policy) Validate() error {
	if !ValidName(p.Name) {
		return fmt.Errorf("%w: name %q is not 1-%d letters, digits, '_', '.', '-'", ErrBadPolicy, clip(p.Name), MaxNameLen)
	}
	if len(p.Rules) > MaxRules {
		return fmt.Errorf("%w %s: %d rules, at most %d", ErrBadPolicy, p.Name, len(p.Rules), MaxRules)
	}
	if len(p.Rules) == 0 && !p.Operator && !p.Management {
		return fmt.Errorf("%w %s: grants nothing (no rules, neither operator nor management)", ErrBadPolicy, p.Name)
	}
	for i, r := range p.Rules {
		if err := ValidGlob(r.Namespace); err != nil {
			return fmt.Errorf("policy %s rule %d: %w", p.Name, i+1, err)
		}
		if len(r.Capabilities) == 0 {
			return fmt.Errorf("%w %s rule %d (namespace %s): no capabilities", ErrBadPolicy, p.Name, i+1, r.Namespace)
		}
		for _, c := range r.Capabilities {
			if !c.Valid() {
				return fmt.Errorf("policy %s rule %d (namespace %s): %w %q (one of %s; operator and management are the policy's own fields)",
					p.Name, i+1, r.Namespace, ErrUnknownCapability, clip(string(c)), capList())
			}
		}
	}
	return nil
}

func capList() string {
	s := make([]string, len(NamespaceCapabilities))
	for i, c := range NamespaceCapabilities {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

// Grants says whether p grants c in namespace ns (ns is ignored for a
// global capability).
func (p Policy) Grants(ns string, c Capability) bool {
	if p.Management {
		return true
	}
	switch c {
	case CapOperator:
		return p.Operator
	case CapManagement, CapNone:
		return false
	}
	for _, r := range p.Rules {
		if MatchNamespace(r.Namespace, ns) && slices.Contains(r.Capabilities, c) {
			return true
		}
	}
	return false
}

// Allowed says whether any of policies grants c in namespace ns.
func Allowed(policies []Policy, ns string, c Capability) bool {
	for _, p := range policies {
		if p.Grants(ns, c) {
			return true
		}
	}
	return false
}

// Token is a token as the replicated state keeps it: its secret only as
// a hash.
type Token struct {
	Accessor string   `json:"accessor"`
	Name     string   `json:"name"`
	Policies []string `json:"policies,omitempty"`
	// Management is set on the bootstrap token: it holds every
	// capability whatever policies exist.
	Management bool      `json:"management,omitempty"`
	Hash       string    `json:"hash"`
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	RevokedAt  time.Time `json:"revoked_at,omitzero"`
}

// Expired says whether t has expired at now.
func (t Token) Expired(now time.Time) bool { return !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt) }

// Public returns t without its hash, as lists show it.
func (t Token) Public() Token { t.Hash = ""; return t }

// HashSecret returns the hex sha256 of a secret: what the state keeps.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// NewSecret returns a new random secret and its accessor id (a separate
// random id, so that neither reveals the other).
func NewSecret() (secret, accessor string) {
	var b [SecretBytes]byte
	_, _ = rand.Read(b[:])
	secret = "fct_" + hex.EncodeToString(b[:])
	return secret, rand.Text()
}

// Identity is who a request is from.
type Identity struct {
	Accessor string `json:"accessor"`
	Name     string `json:"name"`
	// Policies are the identity's policies as they stand now.
	Policies   []Policy `json:"-"`
	PolicyIDs  []string `json:"policies,omitempty"`
	Management bool     `json:"management,omitempty"`
	// Anonymous is a request without a token.
	Anonymous bool `json:"anonymous,omitempty"`
}

// Allowed says whether the identity holds c in namespace ns.
func (id Identity) Allowed(ns string, c Capability) bool {
	if c == CapNone || id.Management {
		return true
	}
	return Allowed(id.Policies, ns, c)
}

// AnyNamespace says whether the identity holds c in some namespace: a
// list it may read, filtered to those namespaces.
func (id Identity) AnyNamespace(c Capability) bool {
	if id.Management || c == CapNone {
		return true
	}
	for _, p := range id.Policies {
		if p.Management || (c == CapOperator && p.Operator) {
			return true
		}
		for _, r := range p.Rules {
			if slices.Contains(r.Capabilities, c) {
				return true
			}
		}
	}
	return false
}

// AllNamespaces says whether the identity holds c in every namespace:
// management, or a rule of namespace "*".
func (id Identity) AllNamespaces(c Capability) bool {
	if id.Management || c == CapNone {
		return true
	}
	for _, p := range id.Policies {
		if p.Management {
			return true
		}
		for _, r := range p.Rules {
			if r.Namespace == "*" && slices.Contains(r.Capabilities, c) {
				return true
			}
		}
	}
	return false
}

// Namespaces lists the namespace globs the identity holds c in ("*"
// for every namespace): the dashboard's header names those it reads in,
// and an apply replaces the jobs of those it applies in.
func (id Identity) Namespaces(c Capability) []string {
	if id.AllNamespaces(c) {
		return []string{"*"}
	}
	var out []string
	for _, p := range id.Policies {
		for _, r := range p.Rules {
			if slices.Contains(r.Capabilities, c) && !slices.Contains(out, r.Namespace) {
				out = append(out, r.Namespace)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Management is the identity of a management credential without a
// token in the state (the configured api.token).
func Management(name string) Identity {
	return Identity{Accessor: "api.token", Name: name, Management: true}
}

// State is the ACL part of the replicated state.
type State struct {
	Bootstrapped bool              `json:"bootstrapped,omitempty"`
	Policies     map[string]Policy `json:"policies,omitempty"`
	// Tokens are by accessor; a revoked one stays (RevokedAt set) until
	// MaxRevoked newer ones push it out.
	Tokens map[string]Token `json:"tokens,omitempty"`
}

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	if s == nil {
		return nil
	}
	c := &State{Bootstrapped: s.Bootstrapped, Policies: make(map[string]Policy, len(s.Policies)), Tokens: make(map[string]Token, len(s.Tokens))}
	for k, p := range s.Policies {
		p.Rules = slices.Clone(p.Rules)
		for i := range p.Rules {
			p.Rules[i].Capabilities = slices.Clone(p.Rules[i].Capabilities)
		}
		c.Policies[k] = p
	}
	for k, t := range s.Tokens {
		t.Policies = slices.Clone(t.Policies)
		c.Tokens[k] = t
	}
	return c
}

// Resolve returns the identity of the token whose secret is secret at
// now, or why there is none (ErrUnknownToken, ErrRevokedToken,
// ErrExpiredToken).
func (s *State) Resolve(secret string, now time.Time) (Identity, error) {
	if s == nil || secret == "" {
		return Identity{}, ErrUnknownToken
	}
	h := HashSecret(secret)
	for _, t := range s.Tokens {
		if subtle.ConstantTimeCompare([]byte(t.Hash), []byte(h)) != 1 {
			continue
		}
		return s.identity(t, now)
	}
	return Identity{}, ErrUnknownToken
}

// ByAccessor returns the identity of the token with accessor at now, or
// why there is none: a dashboard session keeps the accessor, not the
// secret, and ends once this fails.
func (s *State) ByAccessor(accessor string, now time.Time) (Identity, error) {
	if s == nil {
		return Identity{}, ErrUnknownToken
	}
	t, ok := s.Tokens[accessor]
	if !ok {
		return Identity{}, fmt.Errorf("%w: accessor %s is not a token of this cluster any more", ErrRevokedToken, accessor)
	}
	return s.identity(t, now)
}

// identity is t's identity with its policies as they stand, or why t
// holds none at now.
func (s *State) identity(t Token, now time.Time) (Identity, error) {
	switch {
	case !t.RevokedAt.IsZero():
		return Identity{}, fmt.Errorf("%w: accessor %s was revoked at %s", ErrRevokedToken, t.Accessor, t.RevokedAt.UTC().Format(time.RFC3339))
	case t.Expired(now):
		return Identity{}, fmt.Errorf("%w: accessor %s expired at %s", ErrExpiredToken, t.Accessor, t.ExpiresAt.UTC().Format(time.RFC3339))
	}
	id := Identity{Accessor: t.Accessor, Name: t.Name, Management: t.Management, PolicyIDs: slices.Clone(t.Policies)}
	for _, name := range t.Policies {
		if p, ok := s.Policies[name]; ok {
			id.Policies = append(id.Policies, p)
		}
	}
	return id, nil
}

// PolicyList returns the policies by name.
func (s *State) PolicyList() []Policy {
	if s == nil {
		return nil
	}
	out := make([]Policy, 0, len(s.Policies))
	for _, p := range s.Policies {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// TokenList returns the tokens without their hashes, oldest first.
func (s *State) TokenList() []Token {
	if s == nil {
		return nil
	}
	out := make([]Token, 0, len(s.Tokens))
	for _, t := range s.Tokens {
		out = append(out, t.Public())
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].Accessor < out[j].Accessor
	})
	return out
}
