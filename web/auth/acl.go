package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// Access control (acl: {enabled: true}). Every request is judged by one
// table, Routes: the route chi matched gives the capability it needs and
// where its namespace comes from (Scope). The caller is the identity of
// its token (Identify): api.token and a dashboard login are the
// management identity, an "Authorization: Bearer SECRET" of a token in
// the replicated ACL state is that token's, the store credential of a
// node is a node's, and a request without any is anonymous, which holds
// nothing. A route without a row is refused. With ACLs off the table is
// not consulted: the node behaves as before.

// Scope says where a route's namespace comes from.
type Scope int

// Scopes.
const (
	// ScopeNone: no namespace; the capability is global (operator,
	// management) or none is needed.
	ScopeNone Scope = iota
	// ScopeAny: the capability in any namespace; the answer lists only
	// what the caller may read (a list, a stream, a page of them).
	ScopeAny
	// ScopeJob: the job named by {name}, qualified or with ?namespace=.
	ScopeJob
	// ScopeAttempt: the job of the attempt {id}.
	ScopeAttempt
	// ScopeKey: the store key in the path's rest ("ns/NS/..." is NS's,
	// any other key the default namespace's).
	ScopeKey
	// ScopePrefix: the store keys under ?prefix=.
	ScopePrefix
)

// Route is one row of the route table.
type Route struct {
	// Method is the HTTP method ("*": any not listed on its own row).
	Method  string
	Pattern string
	Cap     acl.Capability
	Scope   Scope
	// FenceToken: a request that carries a signed fence token
	// (Fencecron-Token) and no Authorization is judged by the store
	// alone: the token's signature and scope are a job's whole write
	// credential, and a job's process holds no ACL token.
	FenceToken bool
}

// Routes is THE table: every route of the public port, the dashboard's
// included, with the capability it needs. web's middleware reads it for
// every request; a test walks the router and requires a row for each
// route.
var Routes = []Route{
	// Anyone: health, the login form, static files, the calls between
	// nodes (their handler admits only nodes of the cluster), bootstrap
	// (once: its own check refuses a second).
	{"GET", "/healthz", acl.CapNone, ScopeNone, false},
	{"GET", "/readyz", acl.CapNone, ScopeNone, false},
	{"GET", "/login", acl.CapNone, ScopeNone, false},
	{"POST", "/login", acl.CapNone, ScopeNone, false},
	{"POST", "/logout", acl.CapNone, ScopeNone, false},
	{"*", "/static/*", acl.CapNone, ScopeNone, false},
	{"*", "/internal/v1/*", acl.CapNone, ScopeNone, false},
	{"POST", "/api/v1/acl/bootstrap", acl.CapNone, ScopeNone, false},
	// The dashboard.
	{"GET", "/", acl.CapRead, ScopeAny, false},
	{"GET", "/jobs", acl.CapRead, ScopeAny, false},
	{"GET", "/jobs/{name}", acl.CapRead, ScopeJob, false},
	{"GET", "/store", acl.CapReadStore, ScopePrefix, false},
	{"GET", "/store/*", acl.CapReadStore, ScopeKey, false},
	{"GET", "/events", acl.CapRead, ScopeAny, false},
	{"GET", "/timeline", acl.CapRead, ScopeAny, false},
	{"GET", "/timeline.svg", acl.CapRead, ScopeAny, false},
	{"GET", "/attempts/{id}", acl.CapRead, ScopeAttempt, false},
	{"GET", "/metrics", acl.CapOperator, ScopeNone, false},
	// The API.
	{"GET", "/api/v1/status", acl.CapRead, ScopeAny, false},
	{"GET", "/api/v1/jobs", acl.CapRead, ScopeAny, false},
	{"GET", "/api/v1/jobs/{name}", acl.CapRead, ScopeJob, false},
	{"GET", "/api/v1/jobs/{name}/explain", acl.CapRead, ScopeJob, false},
	{"POST", "/api/v1/jobs/{name}/trigger", acl.CapTrigger, ScopeJob, false},
	{"POST", "/api/v1/jobs/{name}/backfill", acl.CapBackfill, ScopeJob, false},
	{"POST", "/api/v1/jobs/{name}/pause", acl.CapPause, ScopeJob, false},
	{"POST", "/api/v1/jobs/{name}/resume", acl.CapPause, ScopeJob, false},
	{"POST", "/api/v1/attempts/{id}/release", acl.CapRelease, ScopeAttempt, false},
	{"GET", "/api/v1/attempts/{id}/output", acl.CapRead, ScopeAttempt, false},
	{"GET", "/api/v1/events", acl.CapRead, ScopeAny, false},
	{"GET", "/api/v1/groups", acl.CapRead, ScopeAny, false},
	{"GET", "/api/v1/runs", acl.CapRead, ScopeAny, false},
	{"GET", "/api/v1/skips", acl.CapRead, ScopeAny, false},
	{"GET", "/api/v1/store", acl.CapReadStore, ScopePrefix, false},
	{"GET", "/api/v1/store/*", acl.CapReadStore, ScopeKey, false},
	{"*", "/api/v1/store/*", acl.CapWriteStore, ScopeKey, true},
	{"*", "/api/v1/store", acl.CapReadStore, ScopePrefix, false},
	{"*", "/api/v1/establish/*", acl.CapWriteStore, ScopeKey, true},
	{"GET", "/api/v1/history/*", acl.CapReadStore, ScopeKey, false},
	{"*", "/api/v1/history/*", acl.CapReadStore, ScopeKey, false},
	{"*", "/api/v1/floor", acl.CapOperator, ScopeNone, false},
	{"GET", "/api/v1/jobset", acl.CapApply, ScopeAny, false},
	{"PUT", "/api/v1/jobset", acl.CapApply, ScopeAny, false},
	{"PUT", "/api/v1/jobset/digests", acl.CapApply, ScopeAny, false},
	{"PUT", "/api/v1/jobset/changes", acl.CapApply, ScopeAny, false},
	{"GET", "/api/v1/operator/raft/peers", acl.CapOperator, ScopeNone, false},
	{"DELETE", "/api/v1/operator/raft/peers/{id}", acl.CapOperator, ScopeNone, false},
	{"GET", "/api/v1/snapshot", acl.CapOperator, ScopeNone, false},
	{"PUT", "/api/v1/snapshot", acl.CapOperator, ScopeNone, false},
	{"GET", "/api/v1/acl/policies", acl.CapManagement, ScopeNone, false},
	{"GET", "/api/v1/acl/policies/{name}", acl.CapManagement, ScopeNone, false},
	{"PUT", "/api/v1/acl/policies/{name}", acl.CapManagement, ScopeNone, false},
	{"DELETE", "/api/v1/acl/policies/{name}", acl.CapManagement, ScopeNone, false},
	{"GET", "/api/v1/acl/tokens", acl.CapManagement, ScopeNone, false},
	{"POST", "/api/v1/acl/tokens", acl.CapManagement, ScopeNone, false},
	{"DELETE", "/api/v1/acl/tokens/{accessor}", acl.CapManagement, ScopeNone, false},
	{"GET", "/api/v1/acl/token/self", acl.CapNone, ScopeNone, false},
}

// LookupRoute returns the row of method on pattern (HEAD is GET's; a
// "*" row answers the methods without a row of their own).
func LookupRoute(method, pattern string) (Route, bool) {
	if method == http.MethodHead {
		method = http.MethodGet
	}
	var any *Route
	for i := range Routes {
		rt := &Routes[i]
		if rt.Pattern != pattern {
			continue
		}
		if rt.Method == method {
			return *rt, true
		}
		if rt.Method == "*" {
			any = rt
		}
	}
	if any != nil {
		return *any, true
	}
	return Route{}, false
}

// Denied is a refusal for a missing capability: 403 with the capability
// named in the answer's "missing" field.
type Denied struct {
	Cap       acl.Capability
	Namespace string
	Who       string
}

func (e *Denied) Error() string {
	where := ""
	switch {
	case strings.HasPrefix(e.Namespace, "any namespace") || strings.HasPrefix(e.Namespace, "every namespace"):
		where = " in " + e.Namespace
	case e.Namespace != "":
		where = " in namespace " + e.Namespace
	}
	return fmt.Sprintf("%v: %s lacks capability %s%s", wire.ErrForbidden, e.Who, e.Cap, where)
}
func (e *Denied) Unwrap() error { return wire.ErrForbidden }

// MissingCapability names the capability the caller lacks.
func (e *Denied) MissingCapability() string { return string(e.Cap) }

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id acl.Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityOf returns the identity the middleware found for a request,
// and false when ACLs are off (then every request may read everything).
func IdentityOf(ctx context.Context) (acl.Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(acl.Identity)
	return id, ok
}

// Readable returns a function that says whether the request's caller
// may use c in a namespace: true for every namespace when ACLs are off.
func Readable(r *http.Request, c acl.Capability) func(ns string) bool {
	id, ok := IdentityOf(r.Context())
	if !ok {
		return func(string) bool { return true }
	}
	return func(ns string) bool { return id.Allowed(ns, c) }
}

// ACLEnabled reports whether ACLs are on.
func (g *Guard) ACLEnabled() bool { return g.cfg.ACL }

// Describe names an identity in answers and the audit trail.
func Describe(id acl.Identity) string {
	switch {
	case id.Anonymous:
		return "an anonymous request (no token)"
	case id.Accessor == "":
		return id.Name
	default:
		return "token " + id.Accessor + " (" + id.Name + ")"
	}
}

// Identify returns who r comes from, or why its credential is refused
// (401: a wrong, revoked or expired token, named; 429 when the address
// is locked out). Call it with ACLs on.
func (g *Guard) Identify(r *http.Request) (acl.Identity, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		got, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return acl.Identity{}, fmt.Errorf("%w: the Authorization header must be \"Bearer\" and a token", wire.ErrUnauthorized)
		}
		return g.identifyBearer(r, got)
	}
	if sess, e := g.liveSession(r); sess != "" {
		return g.identifySession(r, e)
	}
	return acl.Identity{Name: "anonymous", Anonymous: true}, nil
}

// Recheck says why the credential r was let through with no longer
// holds (a token revoked or expired, a session ended), for a stream that
// outlives the check at its start; nil while it holds, and with ACLs off.
func (g *Guard) Recheck(r *http.Request) error {
	was, ok := IdentityOf(r.Context())
	if !ok {
		return nil
	}
	now, err := g.Identify(r)
	if err == nil && now.Accessor != was.Accessor {
		err = fmt.Errorf("%w: the session this stream began with has ended", wire.ErrUnauthorized)
	}
	return err
}

// identifySession is the identity of a dashboard session: api.token's,
// or that of the ACL token it logged in with as the token stands now. A
// session whose token was revoked or expired ends here, on every node:
// each looks the accessor up in its own replica of the ACL state.
func (g *Guard) identifySession(r *http.Request, e sessionEntry) (acl.Identity, error) {
	if e.accessor == "" {
		return acl.Management("api.token (dashboard login)"), nil
	}
	id, err := g.aclState().ByAccessor(e.accessor, g.cfg.Clock.Now())
	if err != nil {
		g.sessions.remove(g.sessionNonce(r))
		return acl.Identity{}, fmt.Errorf("%w; the dashboard session that held it has ended: log in again", err)
	}
	return id, nil
}

// identifyBearer resolves a Bearer token: api.token, a node's store
// credential, or a token of the ACL state; a token that is none of them
// is throttled as a wrong api.token is.
func (g *Guard) identifyBearer(r *http.Request, got string) (acl.Identity, error) {
	if g.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(g.cfg.Token)) == 1 {
		return acl.Management("api.token"), nil
	}
	if g.cfg.NodeCredential != "" && subtle.ConstantTimeCompare([]byte(got), []byte(g.cfg.NodeCredential)) == 1 {
		return acl.Identity{Accessor: "", Name: "a node of the cluster (store credential)", Management: true}, nil
	}
	id, err := g.aclState().Resolve(got, g.cfg.Clock.Now())
	switch {
	case err == nil:
		return id, nil
	case errors.Is(err, acl.ErrUnknownToken):
		if err := g.checkToken(r, got, "bearer"); err != nil {
			return acl.Identity{}, fmt.Errorf("%w (not api.token, nor a token of this cluster's ACLs)", err)
		}
		return acl.Management("api.token"), nil
	default:
		return acl.Identity{}, err
	}
}

// Authorize says whether id may use route rt for r, or why not (a
// *Denied, 403). ns is the namespace the route's scope names.
func Authorize(id acl.Identity, rt Route, r *http.Request, param func(string) string) error {
	if rt.Cap == acl.CapNone {
		return nil
	}
	if rt.FenceToken && r.Header.Get("Authorization") == "" && r.Header.Get(jobs.HTTPTokenHeader) != "" {
		return nil
	}
	ns, all, err := namespaceOf(rt.Scope, r, param)
	if err != nil {
		return err
	}
	ok := false
	switch {
	case rt.Cap.Global() || rt.Scope == ScopeNone:
		ok = id.Allowed("", rt.Cap)
	case rt.Scope == ScopeAny:
		ok = id.AnyNamespace(rt.Cap)
	case all:
		ok = id.AllNamespaces(rt.Cap)
		ns = "every namespace (the prefix may cover any namespace's keys; name one with ns/NS/)"
	default:
		ok = id.Allowed(ns, rt.Cap)
	}
	if !ok {
		if rt.Scope == ScopeAny {
			ns = "any namespace"
		}
		return &Denied{Cap: rt.Cap, Namespace: ns, Who: Describe(id)}
	}
	return nil
}

// namespaceOf is the namespace a request names by its route's scope;
// all says it may reach every namespace's keys.
func namespaceOf(sc Scope, r *http.Request, param func(string) string) (ns string, all bool, err error) {
	switch sc {
	case ScopeJob:
		name, q := param("name"), r.URL.Query().Get("namespace")
		if n, _, ok := strings.Cut(name, fencedstore.NamespaceSep); ok {
			return n, false, nil
		}
		if q == "" {
			q = jobs.DefaultNamespace
		}
		return q, false, nil
	case ScopeAttempt:
		return fencedstore.JobNamespace(param("id")), false, nil
	case ScopeKey:
		return fencedstore.KeyNamespace(param("*")), false, nil
	case ScopePrefix:
		p := r.URL.Query().Get("prefix")
		const root = fencedstore.NamespaceKeyRoot
		if rest, ok := strings.CutPrefix(p, root); ok {
			if n, _, ok := strings.Cut(rest, "/"); ok {
				return n, false, nil
			}
			return "", true, nil
		}
		if strings.HasPrefix(root, p) {
			return "", true, nil
		}
		return jobs.DefaultNamespace, false, nil
	}
	return "", false, nil
}

// askerACL names who made a change for the audit trail with ACLs on:
// the token by accessor and name (never its secret), and the address.
func (g *Guard) askerACL(r *http.Request) (string, bool) {
	id, ok := IdentityOf(r.Context())
	if !ok {
		return "", false
	}
	return Describe(id) + " from " + clientKey(r), true
}
