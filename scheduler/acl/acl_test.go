package acl

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func MustPolicy(tb testing.TB, name, body string) Policy {
	tb.Helper()
	p, err := ParsePolicy(name, []byte(body))
	if err != nil {
		tb.Fatalf("ParsePolicy(%s): %v", name, err)
	}
	return p
}

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		err        error
		says       string
	}{
		{"team-a", "rules:\n  - namespace: team-a\n    capabilities: [read, trigger]\n", nil, ""},
		{"json", `{"rules":[{"namespace":"team-*","capabilities":["read-store"]}],"operator":true}`, nil, ""},
		{"ops", "operator: true\n", nil, ""},
		{"bad-cap", "rules:\n  - namespace: a\n    capabilities: [read, destroy]\n", ErrUnknownCapability, `"destroy"`},
		{"global-cap", "rules:\n  - namespace: a\n    capabilities: [operator]\n", ErrUnknownCapability, "operator"},
		{"bad-glob", "rules:\n  - namespace: 'team-['\n    capabilities: [read]\n", ErrBadNamespaceGlob, "team-["},
		{"upper-glob", "rules:\n  - namespace: Team\n    capabilities: [read]\n", ErrBadNamespaceGlob, "Team"},
		{"empty", "{}", ErrBadPolicy, "grants nothing"},
		{"no-caps", "rules:\n  - namespace: a\n", ErrBadPolicy, "no capabilities"},
		{"unknown-field", "rulez: []\n", ErrBadPolicy, "rulez"},
		{"other", "name: someone-else\noperator: true\n", ErrBadPolicy, "someone-else"},
		{"bad name!", "operator: true\n", ErrBadPolicy, "name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePolicy(tc.name, []byte(tc.body))
			if tc.err == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.err, tc.says)
			}
		})
	}
}

func TestAllowed(t *testing.T) {
	a := MustPolicy(t, "a", "rules:\n  - namespace: team-a\n    capabilities: [read, trigger]\n  - namespace: 'shared-*'\n    capabilities: [read-store]\n")
	ops := MustPolicy(t, "ops", "operator: true\n")
	mgmt := MustPolicy(t, "m", "management: true\n")
	for _, tc := range []struct {
		ps   []Policy
		ns   string
		c    Capability
		want bool
	}{
		{[]Policy{a}, "team-a", CapRead, true},
		{[]Policy{a}, "team-a", CapTrigger, true},
		{[]Policy{a}, "team-a", CapApply, false},
		{[]Policy{a}, "team-b", CapRead, false},
		{[]Policy{a}, "shared-x", CapReadStore, true},
		{[]Policy{a}, "shared-x", CapWriteStore, false},
		{[]Policy{a}, "", CapOperator, false},
		{[]Policy{a, ops}, "", CapOperator, true},
		{[]Policy{ops}, "", CapManagement, false},
		{[]Policy{mgmt}, "anything", CapWriteStore, true},
		{[]Policy{mgmt}, "", CapManagement, true},
		{nil, "team-a", CapRead, false},
	} {
		if got := Allowed(tc.ps, tc.ns, tc.c); got != tc.want {
			t.Errorf("Allowed(%d policies, %q, %s) = %v, want %v", len(tc.ps), tc.ns, tc.c, got, tc.want)
		}
	}
	id := Identity{Policies: []Policy{a}}
	if !id.AnyNamespace(CapReadStore) || id.AnyNamespace(CapApply) || id.AnyNamespace(CapOperator) {
		t.Error("AnyNamespace")
	}
	if !(Identity{Management: true}).Allowed("x", CapManagement) {
		t.Error("management identity refused")
	}
}

func token(name string, policies ...string) (*Token, string) {
	secret, acc := NewSecret()
	return &Token{Accessor: acc, Name: name, Policies: policies, Hash: HashSecret(secret), CreatedAt: time.Unix(100, 0)}, secret
}

func TestDecide(t *testing.T) {
	now := time.Unix(100, 0)
	root, rootSecret := token("root")
	s, err := Decide(nil, Cmd{Action: ActBootstrap, Token: root, At: now})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := token("other")
	if _, err := Decide(s, Cmd{Action: ActBootstrap, Token: other, At: now}); !errors.Is(err, ErrAlreadyBootstrapped) {
		t.Fatalf("second bootstrap: %v", err)
	}
	if _, err := Decide(s, Cmd{Action: ActBootstrap, Token: root, At: now.Add(time.Second)}); !errors.Is(err, ErrRepeated) {
		t.Fatalf("the bootstrap again: %v", err)
	}
	id, err := s.Resolve(rootSecret, now)
	if err != nil || !id.Management || id.Accessor != root.Accessor {
		t.Fatalf("Resolve(root) = %+v, %v", id, err)
	}

	// A token for an unknown policy: refused, nothing changes.
	ta, secretA := token("team-a", "a")
	if _, err := Decide(s, Cmd{Action: ActTokenCreate, Token: ta, At: now}); !errors.Is(err, ErrUnknownPolicy) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("unknown policy: %v", err)
	}
	if len(s.Tokens) != 1 {
		t.Fatal("a refused token changed the state")
	}
	pa := MustPolicy(t, "a", "rules:\n  - namespace: team-a\n    capabilities: [read]\n")
	bad := pa
	bad.Rules = []Rule{{Namespace: "x", Capabilities: []Capability{"nope"}}}
	if _, err := Decide(s, Cmd{Action: ActPolicyUpsert, Policy: &bad, At: now}); !errors.Is(err, ErrUnknownCapability) {
		t.Fatalf("bad policy: %v", err)
	}
	s2, err := Decide(s, Cmd{Action: ActPolicyUpsert, Policy: &pa, At: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Policies) != 0 {
		t.Fatal("Decide changed its input")
	}
	ta.ExpiresAt = now.Add(time.Hour)
	s3, err := Decide(s2, Cmd{Action: ActTokenCreate, Token: ta, At: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decide(s3, Cmd{Action: ActTokenCreate, Token: ta, At: now}); !errors.Is(err, ErrRepeated) {
		t.Fatalf("the token created again: %v", err)
	}
	// The policy as written at its time is repeated; Decide applies it
	// again all the same (as log version 10 did), and the leader answers
	// the repeat without proposing it.
	if !Repeated(s3, Cmd{Action: ActPolicyUpsert, Policy: &pa, At: now}) || Repeated(s3, Cmd{Action: ActPolicyUpsert, Policy: &pa, At: now.Add(time.Second)}) {
		t.Fatal("Repeated: the policy upsert at its own time is the repeat, and only it")
	}
	if _, err := Decide(s3, Cmd{Action: ActPolicyUpsert, Policy: &pa, At: now}); err != nil {
		t.Fatalf("the upsert again: %v", err)
	}
	id, err = s3.Resolve(secretA, now)
	if err != nil || id.Management || !id.Allowed("team-a", CapRead) || id.Allowed("team-b", CapRead) {
		t.Fatalf("Resolve(a) = %+v, %v", id, err)
	}
	if _, err := s3.Resolve(secretA, now.Add(time.Hour)); !errors.Is(err, ErrExpiredToken) {
		t.Fatalf("expired: %v", err)
	}
	if _, err := s3.Resolve("fct_nothing", now); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("unknown: %v", err)
	}
	s4, err := Decide(s3, Cmd{Action: ActTokenRevoke, Accessor: ta.Accessor, At: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s4.Resolve(secretA, now); !errors.Is(err, ErrRevokedToken) || !strings.Contains(err.Error(), ta.Accessor) {
		t.Fatalf("revoked: %v", err)
	}
	if _, err := Decide(s4, Cmd{Action: ActTokenRevoke, Accessor: ta.Accessor, At: now.Add(time.Second)}); !errors.Is(err, ErrAlreadyRevoked) {
		t.Fatalf("revoke twice: %v", err)
	}
	if _, err := Decide(s4, Cmd{Action: ActTokenRevoke, Accessor: ta.Accessor, At: now}); !errors.Is(err, ErrRepeated) {
		t.Fatalf("the revoke again: %v", err)
	}
	if _, err := Decide(s4, Cmd{Action: ActTokenRevoke, Accessor: "nope", At: now}); !errors.Is(err, ErrUnknownAccessor) {
		t.Fatalf("revoke unknown: %v", err)
	}
	if _, err := Decide(s4, Cmd{Action: ActPolicyDelete, Name: "zz", At: now}); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("delete unknown: %v", err)
	}
	s5, err := Decide(s4, Cmd{Action: ActPolicyDelete, Name: "a", At: now})
	if err != nil || len(s5.Policies) != 0 {
		t.Fatalf("delete: %v", err)
	}
	for _, tok := range s5.TokenList() {
		if tok.Hash != "" {
			t.Fatal("TokenList shows a hash")
		}
	}
	if _, err := Decide(s5, Cmd{Action: "explode"}); !errors.Is(err, ErrBadAction) {
		t.Fatalf("bad action: %v", err)
	}
}

func TestNewSecret(t *testing.T) {
	s1, a1 := NewSecret()
	s2, a2 := NewSecret()
	if s1 == s2 || a1 == a2 || strings.Contains(s1, a1) || len(HashSecret(s1)) != 64 {
		t.Fatal("secrets not random")
	}
}

// Shows says whether a replica shows a change applied: what a follower
// that forwarded it waits for before it answers.
func TestShows(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	p := Policy{Name: "a", Rules: []Rule{{Namespace: "team-a", Capabilities: []Capability{CapRead}}}}
	tok := &Token{Accessor: "ACC", Name: "ci", Policies: []string{"a"}, Hash: HashSecret("fct_secret"), CreatedAt: now}
	before := &State{Bootstrapped: true, Policies: map[string]Policy{}, Tokens: map[string]Token{}}
	up := Cmd{Action: ActPolicyUpsert, Policy: &p, At: now}
	mk := Cmd{Action: ActTokenCreate, Token: tok, At: now}
	rv := Cmd{Action: ActTokenRevoke, Accessor: "ACC", At: now}
	del := Cmd{Action: ActPolicyDelete, Name: "a", At: now}
	after, err := Decide(before, up)
	if err != nil {
		t.Fatal(err)
	}
	withToken, err := Decide(after, mk)
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := Decide(withToken, rv)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    *State
		c    Cmd
		want bool
	}{
		{"policy not yet there", before, up, false},
		{"policy there as written", after, up, true},
		{"token not yet there", after, mk, false},
		{"token there", withToken, mk, true},
		{"token not yet revoked", withToken, rv, false},
		{"token revoked", revoked, rv, true},
		{"policy not yet deleted", after, del, false},
		{"policy deleted", before, del, true},
	} {
		if got := Shows(tc.s, tc.c); got != tc.want {
			t.Errorf("%s: Shows = %v, want %v", tc.name, got, tc.want)
		}
	}
}
