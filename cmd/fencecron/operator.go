package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/atomicfile"
	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// runOperator is `fencecron operator raft list-peers|remove-peer NAME`.
func runOperator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 2 || args[0] != "raft" || (args[1] != "list-peers" && args[1] != "remove-peer") {
		fmt.Fprint(stderr, "usage: fencecron operator raft list-peers [-addr ADDR]\n       fencecron operator raft remove-peer [-addr ADDR] [-token TOKEN] NAME\n")
		return flag.ErrHelp
	}
	if args[1] == "list-peers" {
		c, _, err := clientFlags("operator raft list-peers", args[2:], stdout, stderr, 0, "")
		if err != nil {
			return err
		}
		var out wire.Peers
		if err := c.do(ctx, http.MethodGet, "/api/v1/operator/raft/peers", nil, &out); err != nil || c.json {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tADDRESS\tVOTER\tLEADER\tGOSSIP\t")
		for _, p := range out.Peers {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%s\t\n", p.ID, p.Address, p.Voter, p.Leader, orNone(p.Gossip))
		}
		return tw.Flush()
	}
	c, rest, err := clientFlags("operator raft remove-peer", args[2:], stdout, stderr, 1, "NAME")
	if err != nil {
		return err
	}
	if c, err = c.atLeader(ctx); err != nil {
		return err
	}
	if err := c.do(ctx, http.MethodDelete, "/api/v1/operator/raft/peers/"+rest[0], nil, nil); err != nil || c.json {
		return err
	}
	fmt.Fprintf(stdout, "removed %s from the raft configuration\n", rest[0])
	return nil
}

// runSnapshot is `fencecron snapshot save|restore FILE`.
func runSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 1 || (args[0] != "save" && args[0] != "restore") {
		fmt.Fprint(stderr, "usage: fencecron snapshot save [-addr ADDR] [-token TOKEN] FILE\n       fencecron snapshot restore [-addr ADDR] [-token TOKEN] FILE\n")
		return flag.ErrHelp
	}
	c, rest, err := clientFlags("snapshot "+args[0], args[1:], stdout, stderr, 1, "FILE")
	if err != nil {
		return err
	}
	if c, err = c.atLeader(ctx); err != nil {
		return err
	}
	path := rest[0]
	if args[0] == "save" {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/snapshot", nil)
		if err != nil {
			return err
		}
		c.authorize(req)
		resp, err := c.http.Do(req)
		if err != nil {
			return reachErr(err)
		}
		body, err := wire.ReadAnswer(resp)
		if err != nil {
			return fmt.Errorf("GET /api/v1/snapshot: %w", err)
		}
		var info struct {
			LastIndex uint64                     `json:"last_index"`
			Epoch     uint64                     `json:"epoch"`
			EpochBase uint64                     `json:"epoch_base"`
			Runs      map[string]json.RawMessage `json:"runs"`
		}
		if err := json.Unmarshal(body, &info); err != nil || info.LastIndex == 0 {
			return fmt.Errorf("the node's answer is not a snapshot (%v)", err)
		}
		// Written whole or not at all: a backup cut short must not
		// replace a good one.
		if err := atomicfile.Write(path, body, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "saved the replicated state at index %d (epoch %d, %d runs) to %s\n", info.LastIndex, max(info.Epoch, info.EpochBase), len(info.Runs), path)
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(data) > replicated.MaxSnapshotBytes {
		return fmt.Errorf("%s is %d MiB: a snapshot is at most %d MiB, and no node takes a larger one", path, len(data)>>20, replicated.MaxSnapshotBytes>>20)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+"/api/v1/snapshot", bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return reachErr(err)
	}
	body, err := wire.ReadAnswer(resp)
	if err != nil {
		return fmt.Errorf("PUT /api/v1/snapshot: %w", err)
	}
	if c.json {
		stdout.Write(body)
		return nil
	}
	var out wire.Restored
	if err := json.Unmarshal(body, &out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restored %s: index %d, %d jobs, %d runs; epochs now count on from %d\n", filepath.Base(path), out.LastIndex, out.Jobs, out.Runs, out.EpochBase)
	return nil
}

// authorize adds the API token to a request (do adds it to changes only).
func (c *client) authorize(req *http.Request) {
	if c.token == "" {
		return
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if strings.HasPrefix(c.base, "http://") && !isLoopbackURL(c.base) {
		fmt.Fprintf(c.errOut, "fencecron: warning: sending the API token to %s in the clear: anyone on the path can read it; give the node api.tls and use https://\n", c.base)
	}
}

// leaderWait bounds how long an operator's command waits for a leader.
const leaderWait = 10 * time.Second

// atLeader returns a client of the leader's HTTP API, for what only the
// leader does (remove a peer, save or restore a snapshot): c itself if its
// node leads, else one at the address the node's status gives for the
// leader, with c's scheme, token and CA. While the node knows no leader
// (an election takes a second or two) it asks again, for up to
// leaderWait.
func (c *client) atLeader(ctx context.Context) (*client, error) {
	var st wire.Status
	q := *c
	q.json = false
	deadline := time.Now().Add(leaderWait)
	for said := false; ; said = true {
		if err := q.do(ctx, http.MethodGet, "/api/v1/status", nil, &st); err != nil {
			return nil, err
		}
		if st.RaftState == "Leader" {
			return c, nil
		}
		if st.LeaderHTTP() != "" {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s knows no leader (waited %s): %w", c.base, leaderWait, election.ErrNoLeader)
		}
		if !said {
			fmt.Fprintf(c.errOut, "fencecron: %s knows no leader yet; waiting up to %s for an election\n", c.base, leaderWait)
		}
		if !jobs.Sleep(ctx, jobs.SystemClock{}, 250*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
	addr := st.LeaderHTTP()
	scheme, _, _ := strings.Cut(c.base, "://")
	l := *c
	l.base = scheme + "://" + addr
	fmt.Fprintf(c.errOut, "fencecron: %s leads; sending this to %s\n", st.Leader, l.base)
	return &l, nil
}
