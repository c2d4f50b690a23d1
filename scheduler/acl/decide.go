package acl

import (
	"fmt"
	"reflect"
	"slices"
	"time"
)

// Actions of an ACL entry.
const (
	ActBootstrap    = "bootstrap"
	ActPolicyUpsert = "policy_upsert"
	ActPolicyDelete = "policy_delete"
	ActTokenCreate  = "token_create"
	ActTokenRevoke  = "token_revoke"
)

// Cmd is the payload of an ACL entry of the replicated log: one action.
// A token's secret never travels in it, only its hash: the proposer made
// the secret and shows it to its caller alone.
type Cmd struct {
	Action string `json:"action"`
	// Policy is the policy upserted (ActPolicyUpsert).
	Policy *Policy `json:"policy,omitempty"`
	// Name is the policy deleted (ActPolicyDelete).
	Name string `json:"name,omitempty"`
	// Token is the token created (ActBootstrap, ActTokenCreate).
	Token *Token `json:"token,omitempty"`
	// Accessor is the token revoked (ActTokenRevoke).
	Accessor string `json:"accessor,omitempty"`
	// By is the accessor and name of who asked, for the audit trail.
	By string `json:"by,omitempty"`
	// At is when the node that took the request took it (the leader's
	// clock if it came without one). A retry of the request carries the
	// same At, which is how Decide knows a revoke it already made.
	At time.Time `json:"at"`
}

// Decide applies c to s and returns the new state, or refuses c whole
// with an error naming the problem (s is never changed). It is pure:
// every server decides the same from the same entry.
//
// A change that s shows was made by c itself (its token there with its
// accessor and secret hash, its token revoked at its At) is refused with
// ErrRepeated rather than ErrAlreadyBootstrapped, ErrBadToken or
// ErrAlreadyRevoked: the request was sent again after its answer was
// lost, and the one who sent it is told it was done. Either way it is a
// refusal that changes nothing, as it was before ErrRepeated.
func Decide(s *State, c Cmd) (*State, error) {
	if s == nil {
		s = &State{}
	}
	if c.Action != ActPolicyUpsert && Repeated(s, c) {
		return nil, fmt.Errorf("%w: %s", ErrRepeated, c.Describe())
	}
	n := s.Clone()
	switch c.Action {
	case ActBootstrap:
		if s.Bootstrapped {
			return nil, ErrAlreadyBootstrapped
		}
		if c.Token == nil {
			return nil, fmt.Errorf("%w: bootstrap without a token", ErrBadToken)
		}
		t := *c.Token
		t.Management, t.Policies, t.ExpiresAt, t.RevokedAt = true, nil, time.Time{}, time.Time{}
		if err := checkNewToken(n, t); err != nil {
			return nil, err
		}
		n.Bootstrapped = true
		n.Tokens[t.Accessor] = t
	case ActPolicyUpsert:
		if c.Policy == nil {
			return nil, fmt.Errorf("%w: upsert without a policy", ErrBadPolicy)
		}
		if err := c.Policy.Validate(); err != nil {
			return nil, err
		}
		if _, ok := n.Policies[c.Policy.Name]; !ok && len(n.Policies) >= MaxPolicies {
			return nil, fmt.Errorf("%w %s: there are already %d policies", ErrBadPolicy, c.Policy.Name, MaxPolicies)
		}
		p := *c.Policy
		p.ModifiedAt = c.At
		n.Policies[p.Name] = p
	case ActPolicyDelete:
		if _, ok := n.Policies[c.Name]; !ok {
			return nil, fmt.Errorf("%w %q", ErrUnknownPolicy, clip(c.Name))
		}
		delete(n.Policies, c.Name)
	case ActTokenCreate:
		if c.Token == nil {
			return nil, fmt.Errorf("%w: create without a token", ErrBadToken)
		}
		t := *c.Token
		t.Management, t.RevokedAt = false, time.Time{}
		if len(t.Policies) == 0 {
			return nil, fmt.Errorf("%w %s: a token needs at least one policy", ErrBadToken, clip(t.Name))
		}
		for _, p := range t.Policies {
			if _, ok := n.Policies[p]; !ok {
				return nil, fmt.Errorf("token %s: %w %q", clip(t.Name), ErrUnknownPolicy, clip(p))
			}
		}
		if !t.ExpiresAt.IsZero() && !t.ExpiresAt.After(t.CreatedAt) {
			return nil, fmt.Errorf("%w %s: expires at %s, not after its creation", ErrBadToken, t.Name, t.ExpiresAt.UTC().Format(time.RFC3339))
		}
		if err := checkNewToken(n, t); err != nil {
			return nil, err
		}
		n.Tokens[t.Accessor] = t
	case ActTokenRevoke:
		t, ok := n.Tokens[c.Accessor]
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownAccessor, clip(c.Accessor))
		}
		if !t.RevokedAt.IsZero() {
			return nil, fmt.Errorf("%w: accessor %s was revoked at %s", ErrAlreadyRevoked, t.Accessor, t.RevokedAt.UTC().Format(time.RFC3339))
		}
		t.RevokedAt = c.At
		n.Tokens[t.Accessor] = t
		pruneRevoked(n)
	default:
		return nil, fmt.Errorf("%w %q", ErrBadAction, clip(c.Action))
	}
	return n, nil
}

// Repeated reports whether s shows c applied (Shows) by c itself: c's
// token (its accessor and secret hash are random, chosen once by the node
// that took the request), c's revoke (the token revoked at c's At, the
// time of that node's clock when it took the request), or c's policy as
// c wrote it at c's At. Decide refuses all but the last (an upsert applied again
// changes nothing but the audit trail, and a server of log version 10
// applies it again: so must this one); the leader answers a repeated
// upsert without proposing it.
func Repeated(s *State, c Cmd) bool {
	if s == nil || !Shows(s, c) {
		return false
	}
	switch c.Action {
	case ActPolicyUpsert:
		return !c.At.IsZero() && s.Policies[c.Policy.Name].ModifiedAt.Equal(c.At)
	case ActBootstrap, ActTokenCreate:
		return s.Tokens[c.Token.Accessor].Hash == c.Token.Hash
	case ActTokenRevoke:
		return !c.At.IsZero() && s.Tokens[c.Accessor].RevokedAt.Equal(c.At)
	}
	return false
}

// checkNewToken says what keeps t from joining n.
func checkNewToken(n *State, t Token) error {
	switch {
	case !ValidName(t.Name):
		return fmt.Errorf("%w: name %q is not 1-%d letters, digits, '_', '.', '-'", ErrBadToken, clip(t.Name), MaxNameLen)
	case t.Accessor == "" || len(t.Accessor) > 64:
		return fmt.Errorf("%w %s: bad accessor", ErrBadToken, t.Name)
	case len(t.Hash) != 64:
		return fmt.Errorf("%w %s: bad secret hash", ErrBadToken, t.Name)
	case len(n.Tokens) >= MaxTokens:
		return fmt.Errorf("%w %s: there are already %d tokens", ErrBadToken, t.Name, MaxTokens)
	}
	if _, dup := n.Tokens[t.Accessor]; dup {
		return fmt.Errorf("%w %s: accessor %s exists", ErrBadToken, t.Name, t.Accessor)
	}
	for _, o := range n.Tokens {
		if o.Hash == t.Hash {
			return fmt.Errorf("%w %s: its secret is another token's", ErrBadToken, t.Name)
		}
	}
	return nil
}

// pruneRevoked forgets the oldest revoked tokens past MaxRevoked.
func pruneRevoked(n *State) {
	var revoked []Token
	for _, t := range n.Tokens {
		if !t.RevokedAt.IsZero() {
			revoked = append(revoked, t)
		}
	}
	if len(revoked) <= MaxRevoked {
		return
	}
	slices.SortFunc(revoked, func(a, b Token) int {
		if c := a.RevokedAt.Compare(b.RevokedAt); c != 0 {
			return c
		}
		if a.Accessor < b.Accessor {
			return -1
		}
		return 1
	})
	for _, t := range revoked[:len(revoked)-MaxRevoked] {
		delete(n.Tokens, t.Accessor)
	}
}

// Describe says what the entry does, for the audit trail: by accessor and
// name, never a secret.
func (c Cmd) Describe() string {
	var what string
	switch c.Action {
	case ActBootstrap:
		what = fmt.Sprintf("bootstrap: management token %s (%s)", c.Token.Accessor, c.Token.Name)
	case ActPolicyUpsert:
		what = "policy " + c.Policy.Name + " applied"
	case ActPolicyDelete:
		what = "policy " + c.Name + " deleted"
	case ActTokenCreate:
		what = fmt.Sprintf("token %s (%s) created with policies %v", c.Token.Accessor, c.Token.Name, c.Token.Policies)
	case ActTokenRevoke:
		what = "token " + c.Accessor + " revoked"
	}
	if c.By != "" {
		what += " by " + c.By
	}
	return what
}

// Shows reports whether s shows change c applied: the token it created
// is there, the one it revoked is revoked or gone, the policy it wrote
// is there as written, the one it deleted is gone. A node that forwarded
// c to the leader waits for its replica to show it before it answers, so
// the next call to that node sees it (read your writes).
func Shows(s *State, c Cmd) bool {
	if s == nil {
		s = &State{}
	}
	switch c.Action {
	case ActBootstrap, ActTokenCreate:
		_, ok := s.Tokens[tokenAccessor(c.Token)]
		return ok
	case ActTokenRevoke:
		t, ok := s.Tokens[c.Accessor]
		return !ok || !t.RevokedAt.IsZero()
	case ActPolicyUpsert:
		p, ok := s.Policies[policyName(c.Policy)]
		if !ok || c.Policy == nil {
			return false
		}
		p.ModifiedAt = c.Policy.ModifiedAt // the leader's clock set it
		return reflect.DeepEqual(p, *c.Policy)
	case ActPolicyDelete:
		_, ok := s.Policies[c.Name]
		return !ok
	}
	return true
}

func tokenAccessor(t *Token) string {
	if t == nil {
		return ""
	}
	return t.Accessor
}

func policyName(p *Policy) string {
	if p == nil {
		return ""
	}
	return p.Name
}
