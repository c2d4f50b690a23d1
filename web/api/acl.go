package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/web/auth"
)

// The access control endpoints (/api/v1/acl): bootstrap, policies and
// tokens. Changes go through the leader as one ACL entry each
// (Scheduler.ACL), decided in Apply; a token's secret is made here, shown
// once in the answer, and only its hash is replicated.

// maxPolicyBody bounds a policy's body.
const maxPolicyBody = 64 << 10

// NewToken is the answer that creates a token: the only one that shows
// its secret.
type NewToken struct {
	Accessor  string    `json:"accessor"`
	Secret    string    `json:"secret"`
	Name      string    `json:"name"`
	Policies  []string  `json:"policies,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// TokenRequest is the body of POST /api/v1/acl/tokens.
type TokenRequest struct {
	Name     string   `json:"name"`
	Policies []string `json:"policies"`
	// TTL is a Go duration ("720h"); empty: the token does not expire.
	TTL string `json:"ttl,omitempty"`
}

// errACLOff answers the ACL endpoints of a node without ACLs.
var errACLOff = fmt.Errorf("%w: ACLs are not enabled on this node (set acl: {enabled: true} in its config)", acl.ErrNotBootstrapped)

func (s *Server) aclRoutes(r chi.Router) {
	r.With(s.requireWrite).Post("/acl/bootstrap", s.handleACLBootstrap)
	r.Get("/acl/policies", s.handlePolicies)
	r.Get("/acl/policies/{name}", s.handlePolicy)
	r.With(s.requireWrite).Put("/acl/policies/{name}", s.handlePutPolicy)
	r.With(s.requireWrite).Delete("/acl/policies/{name}", s.handleDeletePolicy)
	r.Get("/acl/tokens", s.handleTokens)
	r.With(s.requireWrite).Post("/acl/tokens", s.handleCreateToken)
	r.With(s.requireWrite).Delete("/acl/tokens/{accessor}", s.handleRevokeToken)
	r.Get("/acl/token/self", s.handleTokenSelf)
}

// aclState returns the ACL state, or errACLOff.
func (s *Server) aclState() (*acl.State, error) {
	if !s.Guard.ACLEnabled() || s.ACLState == nil {
		return nil, errACLOff
	}
	return s.ACLState(), nil
}

func (s *Server) handleACLBootstrap(w http.ResponseWriter, r *http.Request) {
	if _, err := s.aclState(); err != nil {
		s.Error(w, r, err)
		return
	}
	secret, accessor := acl.NewSecret()
	t := acl.Token{Accessor: accessor, Name: "bootstrap", Hash: acl.HashSecret(secret), CreatedAt: s.Clock.Now()}
	if err := s.Scheduler.ACL(r.Context(), acl.Cmd{Action: acl.ActBootstrap, Token: &t, By: s.Guard.Asker(r)}); err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, NewToken{Accessor: accessor, Secret: secret, Name: t.Name})
}

func (s *Server) handlePolicies(w http.ResponseWriter, r *http.Request) {
	st, err := s.aclState()
	if err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"policies": nonNil(st.PolicyList())})
}

func (s *Server) handlePolicy(w http.ResponseWriter, r *http.Request) {
	st, err := s.aclState()
	if err != nil {
		s.Error(w, r, err)
		return
	}
	name := chi.URLParam(r, "name")
	p, ok := st.Policies[name]
	if st == nil || !ok {
		s.Error(w, r, fmt.Errorf("policy %q: %w", clipParam(name), jobs.ErrNotFound))
		return
	}
	WriteJSON(w, http.StatusOK, p)
}

func (s *Server) handlePutPolicy(w http.ResponseWriter, r *http.Request) {
	if _, err := s.aclState(); err != nil {
		s.Error(w, r, err)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPolicyBody+1))
	if err != nil || len(body) > maxPolicyBody {
		s.Error(w, r, BadRequest("policy: a body of at most %d bytes (YAML or JSON) is required", maxPolicyBody))
		return
	}
	p, err := acl.ParsePolicy(chi.URLParam(r, "name"), body)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if err := s.Scheduler.ACL(r.Context(), acl.Cmd{Action: acl.ActPolicyUpsert, Policy: &p, By: s.Guard.Asker(r)}); err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, p)
}

func (s *Server) handleDeletePolicy(w http.ResponseWriter, r *http.Request) {
	if _, err := s.aclState(); err != nil {
		s.Error(w, r, err)
		return
	}
	name := chi.URLParam(r, "name")
	if err := s.Scheduler.ACL(r.Context(), acl.Cmd{Action: acl.ActPolicyDelete, Name: name, By: s.Guard.Asker(r)}); err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]string{"deleted": name})
}

func (s *Server) handleTokens(w http.ResponseWriter, r *http.Request) {
	st, err := s.aclState()
	if err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"tokens": nonNil(st.TokenList())})
}

func (s *Server) handleCreateToken(w http.ResponseWriter, r *http.Request) {
	if _, err := s.aclState(); err != nil {
		s.Error(w, r, err)
		return
	}
	var req TokenRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxPolicyBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.Error(w, r, BadRequest("token: the body must be {\"name\": N, \"policies\": [P, ...], \"ttl\": D}: %v", err))
		return
	}
	now := s.Clock.Now()
	secret, accessor := acl.NewSecret()
	t := acl.Token{Accessor: accessor, Name: req.Name, Policies: req.Policies, Hash: acl.HashSecret(secret), CreatedAt: now}
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 {
			s.Error(w, r, BadRequest("token %s: ttl %q is not a positive Go duration (such as 720h)", clipParam(req.Name), clipParam(req.TTL)))
			return
		}
		t.ExpiresAt = now.Add(d)
	}
	if err := s.Scheduler.ACL(r.Context(), acl.Cmd{Action: acl.ActTokenCreate, Token: &t, By: s.Guard.Asker(r)}); err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, NewToken{Accessor: accessor, Secret: secret, Name: t.Name, Policies: t.Policies, ExpiresAt: t.ExpiresAt})
}

func (s *Server) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	if _, err := s.aclState(); err != nil {
		s.Error(w, r, err)
		return
	}
	a := chi.URLParam(r, "accessor")
	if err := s.Scheduler.ACL(r.Context(), acl.Cmd{Action: acl.ActTokenRevoke, Accessor: a, By: s.Guard.Asker(r)}); err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]string{"revoked": a})
}

// handleTokenSelf answers who the caller is.
func (s *Server) handleTokenSelf(w http.ResponseWriter, r *http.Request) {
	id, ok := auth.IdentityOf(r.Context())
	if !ok {
		s.Error(w, r, errACLOff)
		return
	}
	WriteJSON(w, http.StatusOK, id)
}
