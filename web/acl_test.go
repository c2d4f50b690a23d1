package web

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/web/auth"
)

func withACL(s *Server) { s.ACL = true }

// aclToken makes a token of one policy p in the fixture's ACL state and
// returns its secret.
func aclToken(t testing.TB, f *fixture, p acl.Policy) string {
	t.Helper()
	secret, _ := newACLToken(t, f, p, time.Time{})
	return secret
}

// newACLToken makes a token named "t-" and p's name, of p alone, that
// expires at exp (never if zero), and returns its secret and accessor.
func newACLToken(t testing.TB, f *fixture, p acl.Policy, exp time.Time) (secret, accessor string) {
	t.Helper()
	ctx := context.Background()
	if err := f.sched.ACL(ctx, acl.Cmd{Action: acl.ActPolicyUpsert, Policy: &p}); err != nil {
		t.Fatal(err)
	}
	secret, accessor = acl.NewSecret()
	tok := acl.Token{Accessor: accessor, Name: "t-" + p.Name, Policies: []string{p.Name}, Hash: acl.HashSecret(secret), CreatedAt: at(0), ExpiresAt: exp}
	if err := f.sched.ACL(ctx, acl.Cmd{Action: acl.ActTokenCreate, Token: &tok}); err != nil {
		t.Fatal(err)
	}
	return secret, accessor
}

// policyFor grants exactly c: in namespace ns, or by the policy's flag
// for operator and management.
func policyFor(name string, c acl.Capability, ns string) acl.Policy {
	switch c {
	case acl.CapOperator:
		return acl.Policy{Name: name, Operator: true}
	case acl.CapManagement:
		return acl.Policy{Name: name, Management: true}
	}
	return acl.Policy{Name: name, Rules: []acl.Rule{{Namespace: ns, Capabilities: []acl.Capability{c}}}}
}

// concrete makes a path of a route's pattern and a method of its row.
func concrete(rt auth.Route) (method, path string) {
	method = rt.Method
	if method == "*" {
		method = http.MethodPost
	}
	r := strings.NewReplacer("{name}", "report", "{id}", reportRun+".1", "{accessor}", "nobody", "{rest}", "x")
	path = r.Replace(rt.Pattern)
	if strings.HasSuffix(path, "/*") {
		path = strings.TrimSuffix(path, "*") + reportKey
		if strings.HasPrefix(path, "/static/") {
			path = "/static/app.css"
		}
	}
	if rt.Scope == auth.ScopePrefix {
		path += "?prefix=reports/"
	}
	return method, path
}

// Every route chi serves has a row in the route table, and every row is
// a route: a route without one would be refused to everyone.
func TestRoutes_EveryRouteHasARow(t *testing.T) {
	f := newFixture(t, withACL)
	rows := map[string]bool{}
	err := chi.Walk(f.srv.Handler().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		rt, ok := auth.LookupRoute(method, route)
		if !ok {
			t.Errorf("%s %s has no row in auth.Routes", method, route)
			return nil
		}
		rows[rt.Method+" "+rt.Pattern] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range auth.Routes {
		if !rows[rt.Method+" "+rt.Pattern] {
			t.Errorf("row %s %s names no route", rt.Method, rt.Pattern)
		}
	}
}

// Every route, every capability: a token holding exactly one capability
// gets past the table exactly where the route's row names it (or none);
// elsewhere 403 naming the missing capability. A management token gets
// everywhere, an anonymous request nowhere but the open routes.
func TestACL_EveryRouteEveryCapability(t *testing.T) {
	f := newFixture(t, withACL)
	caps := append(append([]acl.Capability{}, acl.NamespaceCapabilities...), acl.CapOperator, acl.CapManagement)
	secrets := map[acl.Capability]string{}
	for _, c := range caps {
		secrets[c] = aclToken(t, f, policyFor("only-"+strings.ReplaceAll(string(c), "-", ""), c, "*"))
	}
	elsewhere := aclToken(t, f, acl.Policy{Name: "team-b", Rules: []acl.Rule{{Namespace: "team-b", Capabilities: acl.NamespaceCapabilities}}})
	for _, rt := range auth.Routes {
		method, path := concrete(rt)
		if rt.Pattern == "/api/v1/acl/bootstrap" {
			continue // once; TestACL_Bootstrap
		}
		call := func(secret string) (int, string) {
			var h []string
			if secret != "" {
				h = []string{"Authorization", "Bearer " + secret}
			}
			rec := serve(f, method, path, "", "127.0.0.1:4000", "127.0.0.1", h...) // loopback: store writes need TLS otherwise
			var body struct{ Missing string }
			json.Unmarshal(rec.Body.Bytes(), &body)
			// A page shows the refusal as a page: the same words.
			if body.Missing == "" && rec.Code == http.StatusForbidden {
				if _, c, ok := strings.Cut(rec.Body.String(), "lacks capability "); ok {
					body.Missing, _, _ = strings.Cut(c, " ")
				}
			}
			return rec.Code, body.Missing
		}
		for _, c := range caps {
			code, missing := call(secrets[c])
			allowed := rt.Cap == acl.CapNone || rt.Cap == c || c == acl.CapManagement
			switch {
			case allowed && missing != "":
				t.Errorf("%s %s with only %s: %d, want past the table (row needs %s)", method, path, c, code, rt.Cap)
			case !allowed && (code != http.StatusForbidden || missing != string(rt.Cap)):
				t.Errorf("%s %s with only %s: %d missing %q, want 403 missing %q", method, path, c, code, missing, rt.Cap)
			}
		}
		// Anonymous: refused, and a browser on a page is sent to log in.
		page := method == http.MethodGet && !strings.HasPrefix(rt.Pattern, "/api/") && rt.Pattern != "/metrics"
		switch code, missing := call(""); {
		case rt.Cap == acl.CapNone:
		case page && code != http.StatusSeeOther:
			t.Errorf("%s %s anonymous: %d, want 303 to /login", method, path, code)
		case !page && (code != http.StatusForbidden || missing != string(rt.Cap)):
			t.Errorf("%s %s anonymous: %d missing %q, want 403 missing %s", method, path, code, missing, rt.Cap)
		}
		// Every capability, in another namespace only: refused where the
		// route names a namespace of its own.
		if rt.Scope == auth.ScopeJob || rt.Scope == auth.ScopeAttempt || rt.Scope == auth.ScopeKey || rt.Scope == auth.ScopePrefix {
			if code, _ := call(elsewhere); code != http.StatusForbidden {
				t.Errorf("%s %s with team-b's token: %d, want 403", method, path, code)
			}
		}
	}
}

// Revoked, expired and unknown tokens are refused with 401 naming the
// problem; bootstrap works once; the ACL endpoints answer 400 with ACLs
// off, and a cluster without ACLs answers reads as before.
func TestACL_Tokens(t *testing.T) {
	f := newFixture(t, withACL)
	rec := serve(f, "POST", "/api/v1/acl/bootstrap", "", "10.0.0.9:4000", "127.0.0.1")
	var boot struct{ Accessor, Secret string }
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &boot) != nil || boot.Secret == "" {
		t.Fatalf("bootstrap: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(f, "POST", "/api/v1/acl/bootstrap", "", "10.0.0.9:4000", "127.0.0.1"); rec.Code != http.StatusConflict {
		t.Fatalf("second bootstrap: %d %s", rec.Code, rec.Body)
	}
	mgmt := []string{"Authorization", "Bearer " + boot.Secret, "Content-Type", "application/json"}
	for _, tc := range []struct {
		method, path, body string
		code               int
		says               string
	}{
		{"PUT", "/api/v1/acl/policies/bad", "rules: [{namespace: a, capabilities: [read, fly]}]", 400, `unknown capability`},
		{"PUT", "/api/v1/acl/policies/bad", "rules: [{namespace: 'a[', capabilities: [read]}]", 400, "bad namespace glob"},
		{"POST", "/api/v1/acl/tokens", `{"name": "x", "policies": ["nope"]}`, 400, `unknown policy`},
		{"PUT", "/api/v1/acl/policies/team-a", "rules: [{namespace: team-a, capabilities: [read]}]", 200, "team-a"},
		{"DELETE", "/api/v1/acl/tokens/nobody", "", 404, "nobody"},
		{"DELETE", "/api/v1/acl/policies/nope", "", 400, "nope"},
	} {
		rec := serve(f, tc.method, tc.path, tc.body, "10.0.0.9:4000", "127.0.0.1", mgmt...)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.says) {
			t.Errorf("%s %s: %d %s, want %d saying %q", tc.method, tc.path, rec.Code, rec.Body, tc.code, tc.says)
		}
	}
	rec = serve(f, "POST", "/api/v1/acl/tokens", `{"name": "a", "policies": ["team-a"], "ttl": "1h"}`, "10.0.0.9:4000", "127.0.0.1", mgmt...)
	var tok struct{ Accessor, Secret string }
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &tok) != nil {
		t.Fatalf("create token: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(f, "GET", "/api/v1/acl/tokens", "", "10.0.0.9:4000", "127.0.0.1", mgmt...); rec.Code != 200 || strings.Contains(rec.Body.String(), tok.Secret) || strings.Contains(rec.Body.String(), acl.HashSecret(tok.Secret)) {
		t.Fatalf("token list shows a secret or hash: %d %s", rec.Code, rec.Body)
	}
	a := []string{"Authorization", "Bearer " + tok.Secret}
	if rec := serve(f, "GET", "/api/v1/jobs/report?namespace=team-a", "", "10.0.0.9:4000", "127.0.0.1", a...); rec.Code == http.StatusForbidden || rec.Code == http.StatusUnauthorized {
		t.Fatalf("team-a reads its namespace: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(f, "DELETE", "/api/v1/acl/tokens/"+tok.Accessor, "", "10.0.0.9:4000", "127.0.0.1", mgmt...); rec.Code != 200 {
		t.Fatalf("revoke: %d %s", rec.Code, rec.Body)
	}
	rec = serve(f, "GET", "/api/v1/jobs/report?namespace=team-a", "", "10.0.0.9:4000", "127.0.0.1", a...)
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "revoked") || !strings.Contains(rec.Body.String(), tok.Accessor) {
		t.Fatalf("revoked token: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(f, "GET", "/api/v1/status", "", "10.0.0.9:4000", "127.0.0.1", "Authorization", "Bearer fct_wrong"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("unknown token: %d %s", rec.Code, rec.Body)
	}

	off := newFixture(t)
	if rec := serve(off, "POST", "/api/v1/acl/bootstrap", "", "127.0.0.1:4000", "127.0.0.1"); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "acl: {enabled: true}") {
		t.Fatalf("bootstrap without ACLs: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(off, "GET", "/api/v1/jobs", "", "10.0.0.9:4000", "127.0.0.1"); rec.Code != http.StatusOK {
		t.Fatalf("jobs without ACLs: %d %s", rec.Code, rec.Body)
	}
}

// A token of one namespace lists only that namespace's jobs, runs and
// events (the fixture's are all of the default namespace), on the API and
// the dashboard; its apply changes only its namespace's jobs.
func TestACL_ListsAreFiltered(t *testing.T) {
	f := newFixture(t, withACL)
	teamA := aclToken(t, f, acl.Policy{Name: "team-a", Rules: []acl.Rule{{Namespace: "team-a", Capabilities: []acl.Capability{acl.CapRead, acl.CapApply}}}})
	dflt := aclToken(t, f, acl.Policy{Name: "dflt", Rules: []acl.Rule{{Namespace: "default", Capabilities: []acl.Capability{acl.CapRead}}}})
	get := func(secret, path string) string {
		t.Helper()
		rec := serve(f, "GET", path, "", "10.0.0.9:4000", "127.0.0.1", "Authorization", "Bearer "+secret)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	for _, path := range []string{"/api/v1/jobs", "/api/v1/runs", "/api/v1/events", "/api/v1/skips", "/api/v1/groups", "/jobs", "/events", "/"} {
		if body := get(teamA, path); strings.Contains(body, "heartbeat") || strings.Contains(body, reportRun) {
			t.Errorf("GET %s with team-a's token shows the default namespace's jobs:\n%.400s", path, body)
		}
		if body := get(dflt, path); path != "/api/v1/skips" && path != "/api/v1/groups" && !strings.Contains(body, "heartbeat") {
			t.Errorf("GET %s with the default namespace's token does not show heartbeat:\n%.400s", path, body)
		}
	}
	if rec := serve(f, "GET", "/api/v1/jobs/heartbeat", "", "10.0.0.9:4000", "127.0.0.1", "Authorization", "Bearer "+teamA); rec.Code != http.StatusForbidden {
		t.Errorf("team-a reads heartbeat: %d", rec.Code)
	}

	set := `{"jobs": [{"name": "build", "namespace": "team-a", "schedules": ["@every 1m"], "shell": "true"}]}`
	rec := serve(f, "PUT", "/api/v1/jobset", set, "10.0.0.9:4000", "127.0.0.1", "Authorization", "Bearer "+teamA, "Content-Type", "application/json")
	if rec.Code != http.StatusOK {
		t.Fatalf("team-a apply: %d %s", rec.Code, rec.Body)
	}
	f.sched.mu.Lock()
	var names []string
	for _, s := range f.sched.lastSet {
		names = append(names, s.Name)
	}
	scope := f.sched.lastScope
	f.sched.mu.Unlock()
	// The leader keeps the other namespaces' jobs (scheduler's
	// TestSetJobs_Scope): the apply names its namespaces.
	if got := strings.Join(names, ","); got != "build" || !slices.Equal(scope, []string{"team-a"}) {
		t.Errorf("team-a's apply sent %s scoped %v, want build scoped [team-a]", got, scope)
	}
	if !strings.Contains(rec.Body.String(), `"namespaces": [`) || !strings.Contains(rec.Body.String(), `"team-a"`) {
		t.Errorf("team-a's apply does not answer which namespaces it replaced: %s", rec.Body)
	}
	other := `{"jobs": [{"name": "x", "schedules": ["@every 1m"], "shell": "true"}]}`
	rec = serve(f, "PUT", "/api/v1/jobset", other, "10.0.0.9:4000", "127.0.0.1", "Authorization", "Bearer "+teamA, "Content-Type", "application/json")
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), `"missing": "apply"`) {
		t.Errorf("team-a applies a default job: %d %s", rec.Code, rec.Body)
	}
}

// An empty token is no token: with ACLs on and no api.token, "Bearer "
// with nothing after it, or an empty login, holds nothing.
func TestACL_EmptyTokenHoldsNothing(t *testing.T) {
	f := newFixture(t, withACL)
	for _, h := range []string{"Bearer ", "Bearer"} {
		rec := serve(f, "GET", "/api/v1/acl/tokens", "", "127.0.0.1:4000", "127.0.0.1", "Authorization", h)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("Authorization %q on a management route: %d, want 401\n%s", h, rec.Code, rec.Body)
		}
	}
	if code, hdr, _ := loginForm(t, f, "", "/"); code == http.StatusSeeOther || hdr.Get("Set-Cookie") != "" {
		t.Errorf("an empty login: %d, cookie %q; want refused", code, hdr.Get("Set-Cookie"))
	}
}
