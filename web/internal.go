package web

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fencecron/fencecron/scheduler"
)

// maxInternalBody bounds a request on the internal API.
const maxInternalBody = 8 << 20

// requireCredential admits only requests carrying the cluster credential.
func (s *Server) requireCredential(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || s.Credential == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.Credential)) != 1 {
			s.error(w, r, fmt.Errorf("%w: the internal API needs the cluster credential", errUnauthorized))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) handleInternalApply(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxInternalBody))
	if err != nil {
		s.error(w, r, badRequest("read command: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, s.Scheduler.ApplyForwarded(r.Context(), body))
}

// Forwarder carries commands to the leader's internal API; it implements
// scheduler.Forwarder.
type Forwarder struct {
	// Credential is the cluster credential sent as a bearer token.
	Credential string
	// LeaderHTTP returns the leader's HTTP address (host:port).
	LeaderHTTP func() (string, error)
	Client     *http.Client
}

// Forward posts cmd to the leader, looking the leader up again and
// retrying with backoff while there is none, it cannot be reached, or it
// says it no longer leads, until ctx ends.
func (f *Forwarder) Forward(ctx context.Context, cmd []byte) (scheduler.WireResult, error) {
	client := f.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	backoff := 50 * time.Millisecond
	var last error
	for {
		w, err := f.once(ctx, client, cmd)
		if err == nil && w.Code != "not_leader" {
			return w, nil
		}
		if err == nil {
			err = errors.New(w.Message)
		}
		last = err
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return scheduler.WireResult{}, fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (f *Forwarder) once(ctx context.Context, client *http.Client, cmd []byte) (scheduler.WireResult, error) {
	addr, err := f.LeaderHTTP()
	if err != nil {
		return scheduler.WireResult{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/internal/v1/apply", bytes.NewReader(cmd))
	if err != nil {
		return scheduler.WireResult{}, err
	}
	req.Header.Set("Authorization", "Bearer "+f.Credential)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return scheduler.WireResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return scheduler.WireResult{}, fmt.Errorf("leader %s: %s: %s", addr, resp.Status, bytes.TrimSpace(b))
	}
	var w scheduler.WireResult
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
		return scheduler.WireResult{}, fmt.Errorf("leader %s: decode answer: %w", addr, err)
	}
	return w, nil
}
