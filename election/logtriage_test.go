package election

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// records is a slog.Handler that keeps what is logged.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rec)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) take() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.list
	r.list = nil
	return out
}

func mlNode(t *testing.T, name, raftAddr string) *memberlist.Node {
	t.Helper()
	meta, err := json.Marshal(Meta{Role: RoleServer, RaftAddr: raftAddr})
	if err != nil {
		t.Fatal(err)
	}
	return &memberlist.Node{Name: name, Addr: net.ParseIP("127.0.0.1"), Port: 7956, Meta: meta}
}

func TestLogTriage(t *testing.T) {
	rec := &records{}
	members := newMemberTable("n1")
	tr := newLogTriage(slog.New(rec), members)
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	tr.now = func() time.Time { return now }
	w := tr.writer("memberlist")

	t.Run("gossip it cannot decrypt names the secret, once a minute", func(t *testing.T) {
		for range 5 {
			w.Write([]byte("[ERR] memberlist: failed to receive: No installed keys could decrypt the message from=127.0.0.1:7966\n"))
			w.Write([]byte("[ERR] memberlist: Decrypt packet failed: no installed keys could decrypt the message from=127.0.0.1:7966\n"))
		}
		got := rec.take()
		if len(got) != 1 || got[0].Level != slog.LevelWarn || !strings.Contains(got[0].Message, "gossip from 127.0.0.1:7966 could not be decrypted: that node probably has a different cluster.secret") {
			t.Fatalf("logged %d records, first %+v; want one WARN naming the secret", len(got), got)
		}
		if r := tr.noLeaderReason(); !strings.Contains(r, "127.0.0.1:7966") || !strings.Contains(r, "different cluster.secret") || !strings.Contains(r, "10 times") {
			t.Errorf("noLeaderReason() = %q", r)
		}
		now = now.Add(secretWarnEvery)
		w.Write([]byte("[ERR] memberlist: Decrypt packet failed: no installed keys could decrypt the message from=127.0.0.1:7966\n"))
		if got := rec.take(); len(got) != 1 || got[0].Level != slog.LevelWarn {
			t.Errorf("a minute later: %d records, want the WARN again", len(got))
		}
		now = now.Add(3 * time.Minute)
		if r := tr.noLeaderReason(); r != "" {
			t.Errorf("noLeaderReason() three minutes after the last sign = %q, want none", r)
		}
	})
	t.Run("a peer's TLS refusing this node names the secret", func(t *testing.T) {
		tr.writer("raft-net").Write([]byte(`[ERR]  raft-net: failed to decode incoming command: error="remote error: tls: bad certificate" from=127.0.0.1:7977` + "\n"))
		got := rec.take()
		if len(got) != 1 || got[0].Level != slog.LevelWarn || !strings.Contains(got[0].Message, "different cluster.secret") {
			t.Errorf("logged %+v; want one WARN naming the secret", got)
		}
	})
	t.Run("a planned stop's closed connection is INFO", func(t *testing.T) {
		tr.writer("raft-net").Write([]byte(`[ERROR] raft-net: failed to decode incoming command: error="read tcp 127.0.0.1:7957->127.0.0.1:40000: use of closed network connection"` + "\n"))
		tr.writer("raft-net").Write([]byte(`[ERROR] raft-net: failed to decode incoming command: error="transport shutdown"` + "\n"))
		got := rec.take()
		if len(got) != 2 || got[0].Level != slog.LevelInfo || got[1].Level != slog.LevelInfo {
			t.Errorf("logged %+v; want two INFOs", got)
		}
	})
	t.Run("raft retries to a peer gossip says is dead: once per state change, with a count", func(t *testing.T) {
		raft := tr.writer("raft")
		members.set(mlNode(t, "n2", "127.0.0.1:7957"), "alive")
		line := []byte(`[ERROR] raft: failed to heartbeat to: peer=127.0.0.1:7957 "backoff time"=10ms error="dial tcp 127.0.0.1:7957: connect: connection refused"` + "\n")
		raft.Write(line)
		if got := rec.take(); len(got) != 1 || got[0].Level != slog.LevelError {
			t.Fatalf("while gossip says n2 is alive: %+v; want the ERROR as it is", got)
		}
		members.set(mlNode(t, "n2", "127.0.0.1:7957"), "dead")
		if got := rec.take(); len(got) != 1 || got[0].Level != slog.LevelInfo || got[0].Message != "n2 is dead in gossip, was alive" {
			t.Fatalf("n2 dead: %+v; want one INFO saying so", got)
		}
		for range 100 {
			raft.Write(line)
			raft.Write([]byte(`[ERROR] raft: failed to appendEntries to: peer="{Voter n2 127.0.0.1:7957}" error="dial tcp 127.0.0.1:7957: connect: connection refused"` + "\n"))
		}
		got := rec.take()
		if len(got) != 1 || got[0].Level != slog.LevelWarn || !strings.Contains(got[0].Message, "raft cannot reach n2, which gossip says is dead") {
			t.Fatalf("200 failures while n2 is dead: %d records (%+v); want one WARN", len(got), got)
		}
		members.set(mlNode(t, "n2", "127.0.0.1:7957"), "alive")
		got = rec.take()
		if len(got) != 2 || got[0].Message != "n2 is alive in gossip, was dead" || got[1].Level != slog.LevelInfo || !strings.Contains(got[1].Message, "n2 is alive in gossip now: raft failed to reach it 200 times while it was dead") {
			t.Errorf("n2 back: %+v; want its state, then one INFO with the count", got)
		}
	})
}
