package fsm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func aclCmd(c acl.Cmd) replicated.Command {
	c.At = t0
	return replicated.Command{Op: replicated.OpACL, ACL: &c}
}

func newToken(name string, policies ...string) (*acl.Token, string) {
	secret, acc := acl.NewSecret()
	return &acl.Token{Accessor: acc, Name: name, Policies: policies, Hash: acl.HashSecret(secret), CreatedAt: t0}, secret
}

// ACL entries are decided in Apply: a second bootstrap and a token for
// an unknown policy are refused with nothing changed; the state survives
// a snapshot; the audit trail names accessors, never secrets.
func TestFSM_ACL(t *testing.T) {
	f := NewFSM()
	root, rootSecret := newToken("root")
	if res := applyAt(t, f, 1, 1, aclCmd(acl.Cmd{Action: acl.ActBootstrap, Token: root, By: "cli"})); res.Err != nil {
		t.Fatal(res.Err)
	}
	again, _ := newToken("again")
	if res := applyAt(t, f, 1, 2, aclCmd(acl.Cmd{Action: acl.ActBootstrap, Token: again})); !errors.Is(res.Err, acl.ErrAlreadyBootstrapped) {
		t.Fatalf("second bootstrap: %v", res.Err)
	}
	tok, secret := newToken("team-a", "a")
	if res := applyAt(t, f, 1, 3, aclCmd(acl.Cmd{Action: acl.ActTokenCreate, Token: tok})); !errors.Is(res.Err, acl.ErrUnknownPolicy) {
		t.Fatalf("token for unknown policy: %v", res.Err)
	}
	if n := len(f.ACL().Tokens); n != 1 {
		t.Fatalf("tokens = %d after refusals, want 1", n)
	}
	p := acl.Policy{Name: "a", Rules: []acl.Rule{{Namespace: "team-a", Capabilities: []acl.Capability{acl.CapRead}}}}
	if res := applyAt(t, f, 1, 4, aclCmd(acl.Cmd{Action: acl.ActPolicyUpsert, Policy: &p})); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := applyAt(t, f, 1, 5, aclCmd(acl.Cmd{Action: acl.ActTokenCreate, Token: tok, By: root.Accessor + " (root)"})); res.Err != nil {
		t.Fatal(res.Err)
	}

	g := snapshotRestored(t, f)
	for _, s := range []*acl.State{f.ACL(), g.ACL()} {
		if id, err := s.Resolve(secret, t0); err != nil || !id.Allowed("team-a", acl.CapRead) || id.Allowed("team-b", acl.CapRead) {
			t.Fatalf("Resolve(team-a) = %+v, %v", id, err)
		}
		if id, err := s.Resolve(rootSecret, t0); err != nil || !id.Management {
			t.Fatalf("Resolve(root) = %+v, %v", id, err)
		}
	}
	if res := applyAt(t, g, 1, 6, aclCmd(acl.Cmd{Action: acl.ActTokenRevoke, Accessor: tok.Accessor})); res.Err != nil {
		t.Fatal(res.Err)
	}
	if _, err := g.ACL().Resolve(secret, t0); !errors.Is(err, acl.ErrRevokedToken) {
		t.Fatalf("revoked: %v", err)
	}
	if _, err := f.ACL().Resolve(secret, t0); err != nil {
		t.Fatal("a revoke on one FSM changed another's state")
	}

	var acls int
	for _, e := range g.Events(0, 0) {
		if e.Kind != jobs.EventACL {
			continue
		}
		acls++
		if strings.Contains(e.Detail, secret) || strings.Contains(e.Detail, rootSecret) || strings.Contains(e.Detail, tok.Hash) {
			t.Fatalf("audit entry holds a secret or hash: %s", e.Detail)
		}
	}
	if acls != 4 {
		t.Errorf("acl events = %d, want 4 (bootstrap, policy, token, revoke)", acls)
	}
}

// An ACL entry of a version before ACLs halts the FSM: no binary of such
// a version wrote one.
func TestFSM_ACLNeedsItsVersion(t *testing.T) {
	f := NewFSM()
	root, _ := newToken("root")
	old := replicated.VersionACL - 1
	if res := applyRaw(t, f, 1, 1, rawEntry(t, old, aclCmd(acl.Cmd{Action: acl.ActBootstrap, Token: root}))); !errors.Is(res.Err, ErrLogHalted) {
		t.Fatalf("version %d acl entry: err = %v, want ErrLogHalted", old, res.Err)
	}
	if f.ACL() != nil {
		t.Error("a halted entry changed the ACL state")
	}
}

// A backfill entry that names who asked says so in the audit trail.
func TestFSM_BackfillNamesItsAsker(t *testing.T) {
	f := withJobs(t, "report")
	c := backfillCmdOf("report", 1, t0.Add(-time.Hour))
	c.Backfill.By = "token ACC (ci-a) from 127.0.0.1"
	if res := applyAt(t, f, 1, 5, c); res.Err != nil {
		t.Fatal(res.Err)
	}
	evs := f.Events(0, 0)
	if e := evs[len(evs)-1]; !strings.HasSuffix(e.Detail, "; asked by token ACC (ci-a) from 127.0.0.1") {
		t.Errorf("backfill event = %q, want it to name the asker", e.Detail)
	}
}

// An audit entry of kind restored needs log version 10.
func TestFSM_RestoredAuditNeedsItsVersion(t *testing.T) {
	f := NewFSM()
	c := replicated.Command{Op: replicated.OpAudit, Audit: &replicated.AuditCmd{Kind: jobs.EventRestored, Node: "n1", Detail: "snapshot restored by token X (admin)", At: t0}}
	if res := applyRaw(t, f, 1, 1, rawEntry(t, replicated.VersionACL-1, c)); !errors.Is(res.Err, jobs.ErrInvalidConfig) {
		t.Fatalf("version %d: %v", replicated.VersionACL-1, res.Err)
	}
	if res := applyAt(t, f, 1, 2, c); res.Err != nil {
		t.Fatal(res.Err)
	}
	if evs := f.Events(0, 0); len(evs) != 1 || evs[0].Kind != jobs.EventRestored {
		t.Fatalf("events = %+v", evs)
	}
}
