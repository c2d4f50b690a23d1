package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
)

func addrOf(n *localcluster.Node) string { return strings.TrimPrefix(n.URL(), "http://") }

// TestOperator_RaftPeers lists the Raft configuration, refuses to remove a
// server gossip sees alive, and removes one that is gone, asked through a
// follower (the command finds the leader).
func TestOperator_RaftPeers(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 3})
	a := agree(t, c, 30*time.Second)
	var follower, gone *localcluster.Node
	for _, n := range c.Servers() {
		switch {
		case n.Name == a.Leader:
		case follower == nil:
			follower = n
		default:
			gone = n
		}
	}
	if err := localcluster.Until(20*time.Second, func() error {
		out, err := cli(t, "operator", "raft", "list-peers", "-addr", addrOf(follower))
		if err != nil {
			return err
		}
		for _, n := range c.Servers() {
			if !strings.Contains(out, n.Name+" ") {
				return fmt.Errorf("list-peers lacks %s:\n%s", n.Name, out)
			}
		}
		if strings.Count(out, " true ") < 3 || !strings.Contains(out, "alive") {
			return fmt.Errorf("want three voters, one leader, alive in gossip:\n%s", out)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Refused while alive (polling: the follower may not know the
	// leader's HTTP address from gossip yet).
	if err := localcluster.Until(20*time.Second, func() error {
		out, err := cli(t, "operator", "raft", "remove-peer", "-addr", addrOf(follower), gone.Name)
		switch {
		case err == nil:
			t.Fatalf("removing a live server succeeded:\n%s", out)
		case !strings.Contains(err.Error(), "alive in gossip"):
			return fmt.Errorf("%v\n%s; want it refused as alive", err, out)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	gone.Kill()
	if err := localcluster.Until(30*time.Second, func() error {
		out, err := cli(t, "operator", "raft", "remove-peer", "-addr", addrOf(follower), gone.Name)
		if err != nil {
			return fmt.Errorf("%v\n%s", err, out)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	out, err := cli(t, "operator", "raft", "list-peers", "-addr", addrOf(c.Node(a.Leader)))
	if err != nil || strings.Contains(out, gone.Name+" ") {
		t.Fatalf("after remove-peer %s: %v\n%s", gone.Name, err, out)
	}
	if _, err := cli(t, "operator", "raft", "remove-peer", "-addr", addrOf(follower), "nobody"); err == nil || !strings.Contains(err.Error(), "no such server") {
		t.Errorf("removing an unknown server: %v; want no such server", err)
	}
}

// lastKeyJob writes one key every second: a store that has seen a token
// refuses any older one for it, so tokens that went back would show as
// fenced runs.
const lastKeyJob = `  - name: last
    schedule: "@every 1s"
    shell: 'echo "$FENCECRON_EPOCH.$FENCECRON_SEQ"'
    output: 'restore/last.txt'
    overlap: allow
    lease_ttl: 5s
    timeout: 10s
`

// TestOperator_SnapshotRestoreTokensKeepGrowing: save a snapshot of a
// cluster past a few elections, wipe every server (the store, a node of
// its own, keeps its keys), start them again (Raft terms start again at
// 1) and restore: the job set and runs come back, and every token granted
// after the restore is greater than any before, so the store applies its
// writes to the key it had seen newer tokens for.
func TestOperator_SnapshotRestoreTokensKeepGrowing(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 3, StoreNode: true, Jobs: lastKeyJob})
	// Elections, until the epoch is well past what a fresh cluster
	// reaches (under load its first elections may take a few terms).
	for round := 0; round < 12; round++ {
		a := agree(t, c, 30*time.Second)
		if a.Epoch >= 8 {
			break
		}
		old := c.Node(a.Leader)
		if err := old.Terminate(15 * time.Second); err != nil {
			t.Fatal(err)
		}
		if err := old.Start(); err != nil {
			t.Fatal(err)
		}
	}
	a := agree(t, c, 30*time.Second)
	if err := localcluster.Until(30*time.Second, func() error {
		runs, err := c.Node(a.Leader).Runs("last", 50)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if at, ok := r.Latest(); ok && r.State == jobs.Succeeded && at.Token.Epoch == a.Epoch {
				return nil
			}
		}
		return fmt.Errorf("no run of epoch %d succeeded yet", a.Epoch)
	}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "backup.json")
	out, err := cli(t, "snapshot", "save", "-addr", addrOf(c.Servers()[0]), file)
	if err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}
	// The greatest token the snapshot holds, which the restored state
	// must hold too; and the greatest the cluster granted before the wipe
	// (the job keeps firing after the save, and the store saw those), which
	// every token granted after the restore must exceed.
	inSnapshot := greatestIn(t, file)
	before := inSnapshot
	runs, err := c.Node(a.Leader).Runs("last", 2000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		for _, at := range r.Attempts {
			if less(before, at.Token) {
				before = at.Token
			}
		}
	}

	// Wipe every server and start a new cluster on empty data.
	for _, n := range c.Servers() {
		n.Kill()
		if err := n.Wipe(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.Servers() {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	fresh := agree(t, c, 30*time.Second)
	if fresh.Epoch >= before.Epoch {
		t.Fatalf("the fresh cluster is at epoch %d, not below the old %d: the test proves nothing", fresh.Epoch, before.Epoch)
	}
	restoredAt := time.Now()
	// A fresh cluster on a busy machine may still change leaders; a
	// restore that lost its leader while committing is said to have, and
	// the operator runs it again, as here (restoring the same snapshot
	// twice leaves the same state). Any other failure is the test's.
	if err := localcluster.Until(60*time.Second, func() error {
		out, err = cli(t, "snapshot", "restore", "-addr", addrOf(c.Servers()[1]), file)
		if err != nil && !strings.Contains(err.Error(), "leadership lost") && !strings.Contains(err.Error(), "not the leader") && !strings.Contains(err.Error(), "no leader") {
			t.Fatalf("snapshot restore: %v\n%s", err, out)
		}
		if err != nil {
			t.Logf("snapshot restore: %v; again", err)
		}
		return err
	}); err != nil {
		t.Fatalf("snapshot restore: %v\n%s", err, out)
	}
	t.Logf("%s(old greatest token %d.%d; fresh cluster's epoch %d)", out, before.Epoch, before.Seq, fresh.Epoch)

	// New grants carry greater tokens, and the store applies them.
	if err := localcluster.Until(30*time.Second, func() error {
		a, err := localcluster.Agreed(c.Live(c.Servers()))
		if err != nil {
			return err
		}
		if a.Epoch < before.Epoch {
			return fmt.Errorf("epoch %d went back below %d", a.Epoch, before.Epoch)
		}
		runs, err := c.Node(a.Leader).Runs("last", 2000)
		if err != nil {
			return err
		}
		restored, applied := false, 0
		var fenced []jobs.Attempt
		var greatestAfter jobs.Fence
		for _, r := range runs {
			for _, at := range r.Attempts {
				if at.Token == inSnapshot {
					restored = true
				}
				if at.GrantedAt.Before(restoredAt) {
					continue
				}
				if !less(before, at.Token) {
					t.Fatalf("attempt %s granted after the restore has token %d.%d, not greater than %d.%d", at.ID, at.Token.Epoch, at.Token.Seq, before.Epoch, before.Seq)
				}
				if less(greatestAfter, at.Token) {
					greatestAfter = at.Token
				}
				if at.State == jobs.Fenced {
					fenced = append(fenced, at)
				}
				if at.StoreOutcome == "applied" {
					applied++
				}
			}
		}
		// Every run writes the same key, so on a busy machine a run may
		// publish after the next one did and be refused for it. Refused
		// for a token from before the restore, it would be the bug.
		for _, at := range fenced {
			if !less(at.Token, greatestAfter) {
				t.Fatalf("attempt %s after the restore was fenced though no later grant wrote its key: %+v", at.ID, at)
			}
		}
		if !restored {
			return fmt.Errorf("the restored state lacks the run of token %d.%d", inSnapshot.Epoch, inSnapshot.Seq)
		}
		if applied < 2 {
			return fmt.Errorf("%d runs applied by the store since the restore", applied)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// less orders fence tokens as the store does.
// greatestIn is the greatest token of the runs in a saved snapshot.
func greatestIn(t *testing.T, file string) jobs.Fence {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Runs map[string]jobs.Run `json:"runs"`
	}
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var g jobs.Fence
	for _, r := range snap.Runs {
		for _, at := range r.Attempts {
			if less(g, at.Token) {
				g = at.Token
			}
		}
	}
	if g == (jobs.Fence{}) {
		t.Fatalf("%s holds no granted run", file)
	}
	return g
}

func less(a, b jobs.Fence) bool { return a.Epoch < b.Epoch || (a.Epoch == b.Epoch && a.Seq < b.Seq) }

// TestOperator_SnapshotRestoreSingleServer: a lone server, which has no
// one to hand leadership to, starts a new epoch of its own after a
// restore (into its running cluster), above every epoch before.
func TestOperator_SnapshotRestoreSingleServer(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 1, Jobs: lastKeyJob})
	before := agree(t, c, 30*time.Second)
	n := c.Servers()[0]
	file := filepath.Join(t.TempDir(), "backup.json")
	if out, err := cli(t, "snapshot", "save", "-addr", addrOf(n), file); err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}
	if out, err := cli(t, "snapshot", "restore", "-addr", addrOf(n), file); err != nil {
		t.Fatalf("snapshot restore: %v\n%s", err, out)
	}
	succeedsInAnEpochAbove(t, n, before.Epoch)
}

// succeedsInAnEpochAbove waits until lone server n leads an epoch above
// epoch and a run of lastKeyJob of that epoch has succeeded.
func succeedsInAnEpochAbove(t *testing.T, n *localcluster.Node, epoch uint64) {
	t.Helper()
	if err := localcluster.Until(30*time.Second, func() error {
		a, err := localcluster.Agreed([]*localcluster.Node{n})
		if err != nil {
			return err
		}
		if a.Epoch <= epoch {
			return fmt.Errorf("epoch %d; want a new one above %d", a.Epoch, epoch)
		}
		runs, err := n.Runs("last", 5)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if at, ok := r.Latest(); ok && at.Token.Epoch == a.Epoch && r.State == jobs.Succeeded {
				return nil
			}
		}
		return fmt.Errorf("no run of epoch %d succeeded yet", a.Epoch)
	}); err != nil {
		t.Fatalf("%v\n%s", err, n.LogTail(4000))
	}
}

// TestOperator_CraftedSnapshotsRefused: snapshots changed by hand so that
// the cluster could not live with them are refused whole by a real node,
// with a 400 that names the problem; the node keeps serving, its state
// unchanged, and comes back after a restart on its data directory (a
// restore that Raft had kept would have stopped it on every start).
func TestOperator_CraftedSnapshotsRefused(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 1, Jobs: lastKeyJob})
	before := agree(t, c, 30*time.Second)
	n := c.Servers()[0]
	dir := t.TempDir()
	saved := filepath.Join(dir, "backup.json")
	if out, err := cli(t, "snapshot", "save", "-addr", addrOf(n), saved); err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name   string
		change func(m map[string]any)
		want   string
	}{
		{"a ghost in the order", func(m map[string]any) {
			order, _ := m["order"].([]any)
			m["order"] = append(order, "ghost@20260101T000000Z")
		}, `run "ghost@20260101T000000Z" is not in runs`},
		{"a null run", func(m map[string]any) { m["runs"] = map[string]any{"x": nil} }, "runs[x]: null"},
		{"last_index 2^63-1", func(m map[string]any) { m["last_index"] = uint64(math.MaxInt64) }, "no room left for new tokens"},
		{"epoch_base 2^62-1", func(m map[string]any) { m["epoch_base"] = uint64(1<<62 - 1) }, "no room left for new epochs"},
		{"a schedule of garbage", func(m map[string]any) {
			m["jobs"].([]any)[0].(map[string]any)["schedules"] = []any{"garbage !!"}
		}, `"garbage !!"`},
		{"no output cap", func(m map[string]any) { m["jobs"].([]any)[0].(map[string]any)["max_output_bytes"] = -1 }, "max_output_bytes"},
	} {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		tc.change(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPut, n.URL()+"/api/v1/snapshot", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var answer struct{ Error string }
		err = json.NewDecoder(resp.Body).Decode(&answer)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest || !strings.Contains(answer.Error, tc.want) {
			t.Errorf("%s: restore answered %s %q (%v); want a 400 naming %q", tc.name, resp.Status, answer.Error, err, tc.want)
		}
		// The command line says the same.
		bad := filepath.Join(dir, fmt.Sprintf("bad-%d.json", i))
		if err := os.WriteFile(bad, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := cli(t, "snapshot", "restore", "-addr", addrOf(n), bad); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: fencecron snapshot restore: %v\n%s\nwant an error naming %q", tc.name, err, out, tc.want)
		}
		if st, err := n.Status(); err != nil || st.Epoch != before.Epoch {
			t.Fatalf("%s: after the refused restore the node answers %+v, %v; want it serving epoch %d", tc.name, st, err, before.Epoch)
		}
	}
	if err := n.Terminate(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	succeedsInAnEpochAbove(t, n, before.Epoch)
}
