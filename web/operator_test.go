package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// fakeOperator records what the operator endpoints asked of it.
type fakeOperator struct {
	removed  []string
	restored string
	fail     error
}

func (o *fakeOperator) RemovePeer(_ context.Context, id string) error {
	if o.fail != nil {
		return o.fail
	}
	o.removed = append(o.removed, id)
	return nil
}

func (o *fakeOperator) SaveSnapshot(_ context.Context, w io.Writer) error {
	if o.fail != nil {
		return o.fail
	}
	_, err := io.WriteString(w, `{"last_index":7}`)
	return err
}

func (o *fakeOperator) RestoreSnapshot(_ context.Context, r io.Reader) (wire.Restored, error) {
	if o.fail != nil {
		return wire.Restored{}, o.fail
	}
	b, _ := io.ReadAll(r)
	o.restored = string(b)
	return wire.Restored{LastIndex: 7, EpochBase: 4}, nil
}

func TestServer_Operator(t *testing.T) {
	const token = "the-api-token-0123456789"
	op := &fakeOperator{}
	f := newFixture(t, func(s *Server) { s.APIToken = token; s.Operator = op })
	bearer := []string{"Authorization", "Bearer " + token}

	t.Run("list peers, open to read", func(t *testing.T) {
		code, _, body := f.do(t, http.MethodGet, "/api/v1/operator/raft/peers", "")
		var got wire.Peers
		if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil {
			t.Fatalf("%d %s (%v)", code, body, err)
		}
		want := []wire.Peer{{ID: "n1", Address: "127.0.0.1:7947", Voter: true, Gossip: "dead"}, {ID: "n2", Address: "127.0.0.1:7957", Voter: true, Leader: true, Gossip: "alive"}}
		if fmt.Sprint(got.Peers) != fmt.Sprint(want) || got.Node != "n2" {
			t.Errorf("peers %+v; want %+v", got, want)
		}
	})
	t.Run("changes and snapshots need the token", func(t *testing.T) {
		for _, r := range []struct{ method, path string }{
			{http.MethodDelete, "/api/v1/operator/raft/peers/n1"},
			{http.MethodGet, "/api/v1/snapshot"},
			{http.MethodPut, "/api/v1/snapshot"},
		} {
			if code, _, body := f.do(t, r.method, r.path, "{}"); code != http.StatusUnauthorized {
				t.Errorf("%s %s without a token: %d %s; want 401", r.method, r.path, code, body)
			}
		}
		if len(op.removed) > 0 || op.restored != "" {
			t.Errorf("acted without a token: %+v", op)
		}
	})
	t.Run("with the token", func(t *testing.T) {
		if code, _, body := f.do(t, http.MethodDelete, "/api/v1/operator/raft/peers/n1", "", bearer...); code != http.StatusOK || strings.Join(op.removed, ",") != "n1" {
			t.Errorf("remove: %d %s, removed %v", code, body, op.removed)
		}
		if code, hdr, body := f.do(t, http.MethodGet, "/api/v1/snapshot", "", bearer...); code != http.StatusOK || body != `{"last_index":7}` || hdr.Get("Content-Type") != "application/json" {
			t.Errorf("save: %d %q %v", code, body, hdr)
		}
		if code, _, body := f.do(t, http.MethodPut, "/api/v1/snapshot", `{"x":1}`, bearer...); code != http.StatusOK || op.restored != `{"x":1}` || !strings.Contains(body, `"epoch_base": 4`) {
			t.Errorf("restore: %d %s, got %q", code, body, op.restored)
		}
	})
	t.Run("errors become codes", func(t *testing.T) {
		for _, tc := range []struct {
			err  error
			code int
		}{
			{fmt.Errorf("n1: %w", election.ErrPeerAlive), http.StatusConflict},
			{fmt.Errorf("n9: %w", election.ErrNoSuchPeer), http.StatusNotFound},
			{election.ErrNotLeader, http.StatusServiceUnavailable},
			{errors.New("boom"), http.StatusInternalServerError},
		} {
			op.fail = tc.err
			if code, _, body := f.do(t, http.MethodDelete, "/api/v1/operator/raft/peers/n1", "", bearer...); code != tc.code {
				t.Errorf("%v: %d %s; want %d", tc.err, code, body, tc.code)
			}
		}
		op.fail = nil
	})
	t.Run("a node without operator endpoints", func(t *testing.T) {
		g := newFixture(t, func(s *Server) { s.APIToken = token })
		if code, _, body := g.do(t, http.MethodGet, "/api/v1/snapshot", "", bearer...); code != http.StatusNotFound {
			t.Errorf("%d %s; want 404", code, body)
		}
	})
}
