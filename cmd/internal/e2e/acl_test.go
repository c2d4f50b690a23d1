package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

const aclAPIToken = "e2e-management-api-token-0123456789abcdef"

// aclDo sends one request with a token and returns the status and body.
func aclDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// secretOf reads the secret and accessor `fencecron acl ... create`
// printed.
func secretOf(t *testing.T, out string) (secret, accessor string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "secret" {
			secret = f[1]
		}
		if len(f) == 2 && f[0] == "accessor" {
			accessor = f[1]
		}
	}
	if secret == "" || accessor == "" {
		t.Fatalf("no secret and accessor in:\n%s", out)
	}
	return secret, accessor
}

// teamAApply applies team-a's jobs with team-a's token through the CLI,
// as its team would: the dry-run compares with team-a's jobs alone and
// says the apply keeps every other namespace's; the apply says so too.
func teamAApply(t *testing.T, node, token string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "team-a.yaml")
	if err := os.WriteFile(file, []byte(`jobs:
  - name: build
    namespace: team-a
    schedule: "@every 2s"
    shell: 'echo a2'
    output: 'out/{{ .RunID }}.txt'
  - name: slow
    namespace: team-a
    schedule: "@every 1h"
    shell: 'sleep 60'
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"FENCECRON_API_TOKEN=" + token}
	out, err := cliEnv(t, env, "apply", "-dry-run", "-addr", node, file)
	if err != nil {
		t.Fatalf("apply -dry-run with team-a's token: %v\n%s", err, out)
	}
	for _, want := range []string{"~ team-a:build\n    shell: \"echo a\" → \"echo a2\"\n", "this token applies namespaces team-a only", "against job set", "(2 jobs in those namespaces): 0 added, 0 removed, 1 changed"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply -dry-run with team-a's token lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "team-b") {
		t.Errorf("apply -dry-run with team-a's token shows team-b:\n%s", out)
	}
	other := filepath.Join(filepath.Dir(file), "team-b.yaml")
	if err := os.WriteFile(other, []byte("jobs:\n  - name: evil\n    namespace: team-b\n    schedule: '@daily'\n    shell: 'true'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cliEnv(t, env, "apply", "-dry-run", "-addr", node, other); err == nil || !strings.Contains(out+err.Error(), "outside this token's namespaces (team-a)") {
		t.Errorf("apply -dry-run of team-b's job with team-a's token: %v\n%s", err, out)
	}
	// Asking by digest about team-b's job is refused before any digest
	// is compared: the answer tells nothing of team-b's jobs.
	if code, body := aclDo(t, "PUT", node+"/api/v1/jobset/digests", token, `{"source":"t","jobs":[{"name":"team-b:build","digest":"0000000000000000"}]}`); code != http.StatusForbidden || strings.Contains(body, "need") {
		t.Errorf("digests naming team-b's job with team-a's token: %d %s; want 403", code, body)
	}
	out, err = cliEnv(t, env, "apply", "-addr", node, file)
	if err != nil || !strings.Contains(out, "applied 2 jobs") || !strings.Contains(out, "this token applies namespaces team-a only") {
		t.Fatalf("apply with team-a's token: %v\n%s", err, out)
	}
	if !strings.Contains(out, "sent 1 new or changed job whole; the node had the other 1") {
		t.Errorf("apply with team-a's token sent more than the changed job:\n%s", out)
	}
}

// teamAChanges sends job set changes with team-a's token to the leader,
// as `fencecron apply` of a file it applied before would: they may remove
// team-a's jobs only, and what they apply keeps every other namespace's.
// Then changes with the management token through a follower, which
// forwards them to the leader.
func teamAChanges(t *testing.T, leader, follower, token, root string) {
	t.Helper()
	statusOf := func(node string) wire.Status {
		var st wire.Status
		code, body := aclDo(t, "GET", node+"/api/v1/status", root, "")
		if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
			t.Fatalf("status: %d %s", code, body)
		}
		return st
	}
	status := func() wire.Status { return statusOf(leader) }
	// holding is a node's status once it holds the set of hash hash: an
	// answer comes once the leader committed the set, and leader (which
	// may no longer lead) applies it after.
	holding := func(node, hash string) wire.Status {
		var st wire.Status
		if err := localcluster.Until(10*time.Second, func() error {
			if st = statusOf(node); st.Jobs.Hash != hash {
				return fmt.Errorf("%s holds set %s, not %s", node, st.Jobs.Hash, hash)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return st
	}
	before := status().Jobs
	changes := func(remove string) (int, string) {
		return aclDo(t, "PUT", leader+"/api/v1/jobset/changes", token, fmt.Sprintf(`{"source":"t","base":%q,"specs":[],"remove":[%q]}`, before.Hash, remove))
	}
	if code, body := changes("team-b:build"); code != http.StatusForbidden {
		t.Errorf("changes removing team-b's job with team-a's token: %d %s; want 403", code, body)
	}
	code, body := changes("team-a:slow")
	var ans wire.JobSetChangesAnswer
	if err := json.Unmarshal([]byte(body), &ans); code != http.StatusOK || err != nil || ans.Applied == nil || fmt.Sprint(ans.Applied.Namespaces) != "[team-a]" {
		t.Fatalf("changes removing team-a:slow with team-a's token: %d %s; want them applied to team-a alone", code, body)
	}
	if after := holding(leader, ans.Applied.Hash).Jobs; after.Count != before.Count-1 {
		t.Errorf("after team-a's changes the set has %d jobs, had %d; want team-a:slow alone removed", after.Count, before.Count)
	}
	if code, body := aclDo(t, "GET", leader+"/api/v1/jobs/team-b:build", root, ""); code != http.StatusOK {
		t.Errorf("team-b:build after team-a's changes: %d %s; want it kept", code, body)
	}

	now := holding(follower, ans.Applied.Hash).Jobs
	code, body = aclDo(t, "PUT", follower+"/api/v1/jobset/changes", root, fmt.Sprintf(`{"source":"t","base":%q,"specs":[],"remove":["team-b:build"]}`, now.Hash))
	ans = wire.JobSetChangesAnswer{}
	if err := json.Unmarshal([]byte(body), &ans); code != http.StatusOK || err != nil || ans.Applied == nil || ans.Applied.Jobs != now.Count-1 {
		t.Fatalf("changes through a follower: %d %s; want them applied, %d jobs", code, body, now.Count-1)
	}
	if after := holding(leader, ans.Applied.Hash).Jobs; after.Count != now.Count-1 {
		t.Errorf("after the follower's changes the set has %d jobs; want %d", after.Count, now.Count-1)
	}
}

// applyPolicy applies policy name of body through node with the
// management token root, as an operator would: a file and `fencecron acl
// policy apply`.
func applyPolicy(t *testing.T, node, root, name, body string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cli(t, "acl", "policy", "apply", "-addr", node, "-token", root, name, p); err != nil {
		t.Fatalf("policy apply %s: %v\n%s", name, err, out)
	}
}

// Two teams on three servers with ACLs on, every call through a
// follower: team A's token cannot see, trigger or apply team B's jobs nor
// read B's keys; a revoked token stops working on every node within a
// second; the audit trail names the accessor of who released an attempt
// and who made each token.
func TestACL_TwoTeamsOnThreeServers(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 3, Profile: "fast",
		Sections: "api:\n  token: " + aclAPIToken + "\nacl:\n  enabled: true\n",
		Jobs: `  - name: build
    namespace: team-a
    schedule: "@every 2s"
    shell: 'echo a'
    output: 'out/{{ .RunID }}.txt'
  - name: slow
    namespace: team-a
    schedule: "@every 1h"
    shell: 'sleep 60'
  - name: build
    namespace: team-b
    schedule: "@every 2s"
    shell: 'echo b'
    output: 'out/{{ .RunID }}.txt'
`})
	// Ready everywhere, then a follower to make every call through.
	var follower, leader *localcluster.Node
	proctest.Eventually(t, 90*time.Second, "three ready servers, one leader", func() error {
		follower, leader = nil, nil
		for _, n := range c.Nodes {
			var st wire.Status
			code, body := aclDo(t, "GET", n.URL()+"/api/v1/status", aclAPIToken, "")
			if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
				return fmt.Errorf("%s: %d %s", n.Name, code, body)
			}
			if code, body := aclDo(t, "GET", n.URL()+"/readyz", "", ""); code != 200 {
				return fmt.Errorf("%s: %s", n.Name, body)
			}
			switch st.RaftState {
			case "Follower":
				follower = n
			case "Leader":
				leader = n
			}
		}
		if follower == nil || leader == nil {
			return fmt.Errorf("no leader and follower yet")
		}
		return nil
	})
	f := follower.URL()
	if code, body := aclDo(t, "GET", f+"/api/v1/jobs", "", ""); code != http.StatusForbidden || !strings.Contains(body, `"missing": "read"`) {
		t.Fatalf("anonymous GET /api/v1/jobs: %d %s", code, body)
	}

	out, err := cli(t, "acl", "bootstrap", "-addr", f)
	if err != nil {
		t.Fatalf("acl bootstrap: %v\n%s", err, out)
	}
	root, rootAccessor := secretOf(t, out)
	if out, err := cli(t, "acl", "bootstrap", "-addr", f); err == nil || !strings.Contains(out+err.Error(), "already bootstrapped") {
		t.Fatalf("second bootstrap: %v\n%s", err, out)
	}
	for _, team := range []string{"team-a", "team-b"} {
		applyPolicy(t, f, root, team, "rules:\n  - namespace: "+team+"\n    capabilities: [read, trigger, apply, release, read-store]\n")
	}
	out, err = cli(t, "acl", "token", "create", "-addr", f, "-token", root, "-name", "ci-a", "-policy", "team-a")
	if err != nil {
		t.Fatalf("token create: %v\n%s", err, out)
	}
	a, aAccessor := secretOf(t, out)
	if out, err := cli(t, "acl", "token", "create", "-addr", f, "-token", root, "-name", "x", "-policy", "nope"); err == nil || !strings.Contains(out+err.Error(), "unknown policy") {
		t.Errorf("token for an unknown policy: %v\n%s", err, out)
	}

	// A sees its own jobs only, here and in runs, events and keys.
	proctest.Eventually(t, 30*time.Second, "team-a's token works on the follower", func() error {
		if code, body := aclDo(t, "GET", f+"/api/v1/jobs", a, ""); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	var list wire.JobList
	_, body := aclDo(t, "GET", f+"/api/v1/jobs", a, "")
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	for _, j := range list.Jobs {
		if j.Namespace != "team-a" {
			t.Errorf("team-a's token lists %s of namespace %s", j.Name, j.Namespace)
		}
	}
	if len(list.Jobs) != 2 {
		t.Errorf("team-a's token lists %d jobs, want its 2", len(list.Jobs))
	}
	// Wait for runs of both teams, so there is something to hide.
	proctest.Eventually(t, 60*time.Second, "a succeeded run of each team", func() error {
		for _, job := range []string{"team-a:build", "team-b:build"} {
			code, body := aclDo(t, "GET", f+"/api/v1/runs?state=succeeded&job="+job, root, "")
			if code != 200 || !strings.Contains(body, job+"@") {
				return fmt.Errorf("%s: %d %.200s", job, code, body)
			}
		}
		return nil
	})
	// fencecron get reads team-a's key with A's token, and is refused
	// team-b's.
	var runs wire.RunList
	for _, team := range []string{"team-a", "team-b"} {
		_, body := aclDo(t, "GET", f+"/api/v1/runs?state=succeeded&job="+team+":build", root, "")
		runs = wire.RunList{}
		if err := json.Unmarshal([]byte(body), &runs); err != nil || len(runs.Runs) == 0 {
			t.Fatalf("runs of %s: %v %.200s", team, err, body)
		}
		out, err := cliEnv(t, []string{"FENCECRON_API_TOKEN=" + a}, "get", "-store", f, runs.Runs[0].Output)
		switch {
		case team == "team-a" && (err != nil || !strings.Contains(out, "a")):
			t.Errorf("get %s with team-a's token: %v\n%s", runs.Runs[0].Output, err, out)
		case team == "team-b" && (err == nil || !strings.Contains(out+err.Error(), "read-store")):
			t.Errorf("get %s with team-a's token: %v\n%s, want refused naming read-store", runs.Runs[0].Output, err, out)
		}
	}
	for _, path := range []string{"/api/v1/runs", "/api/v1/events", "/api/v1/jobs", "/api/v1/store?prefix=ns/team-a/"} {
		code, body := aclDo(t, "GET", f+path, a, "")
		if code != 200 || strings.Contains(body, "team-b") {
			t.Errorf("GET %s with team-a's token: %d, shows team-b: %v", path, code, strings.Contains(body, "team-b"))
		}
	}
	for _, tc := range []struct{ method, path, body, missing string }{
		{"POST", "/api/v1/jobs/build/trigger?namespace=team-b", "", "trigger"},
		{"POST", "/api/v1/jobs/team-b:build/trigger", "", "trigger"},
		{"GET", "/api/v1/jobs/team-b:build", "", "read"},
		{"GET", "/api/v1/store?prefix=ns/team-b/", "", "read-store"},
		{"GET", "/api/v1/store/ns/team-b/out/x.txt", "", "read-store"},
		{"GET", "/api/v1/store?prefix=", "", "read-store"},
		{"PUT", "/api/v1/jobset", `{"jobs": [{"name": "evil", "namespace": "team-b", "schedules": ["@every 1s"], "shell": "true"}]}`, "apply"},
		{"GET", "/api/v1/acl/tokens", "", "management"},
	} {
		code, body := aclDo(t, tc.method, f+tc.path, a, tc.body)
		if code != http.StatusForbidden || !strings.Contains(body, `"missing": "`+tc.missing+`"`) {
			t.Errorf("%s %s with team-a's token: %d %s, want 403 missing %s", tc.method, tc.path, code, body, tc.missing)
		}
	}
	if code, body := aclDo(t, "POST", f+"/api/v1/jobs/build/trigger?namespace=team-a", a, ""); code != 200 {
		t.Errorf("team-a triggers its build: %d %s", code, body)
	}
	teamAApply(t, f, a)
	proctest.Eventually(t, 10*time.Second, "team-b's job kept", func() error {
		if code, body := aclDo(t, "GET", f+"/api/v1/jobs/team-b:build", root, ""); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})

	// A forced release by A names A's accessor in the audit trail.
	code, body := aclDo(t, "POST", f+"/api/v1/jobs/slow/trigger?namespace=team-a", a, "")
	var run jobs.Run
	if code != 200 || json.Unmarshal([]byte(body), &run) != nil || len(run.Attempts) == 0 {
		t.Fatalf("trigger team-a:slow: %d %s", code, body)
	}
	if code, body := aclDo(t, "POST", f+"/api/v1/attempts/"+run.Attempts[0].ID+"/release", a, `{"reason": "e2e"}`); code != 200 {
		t.Fatalf("release: %d %s", code, body)
	}
	proctest.Eventually(t, 10*time.Second, "the audit trail names the accessors", func() error {
		_, body := aclDo(t, "GET", f+"/api/v1/events", root, "")
		for _, want := range []string{"token " + aAccessor + " (ci-a)", "by token " + rootAccessor + " (bootstrap)"} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("events do not name %q", want)
			}
		}
		if strings.Contains(body, a) || strings.Contains(body, root) {
			t.Fatal("the audit trail holds a secret")
		}
		return nil
	})

	readOnlyDashboard(t, f, root)
	teamAChanges(t, leader.URL(), f, a, root)

	// Revoked through the leader: refused on every node within a second.
	if out, err := cli(t, "acl", "token", "revoke", "-addr", leader.URL(), "-token", root, aAccessor); err != nil {
		t.Fatalf("revoke: %v\n%s", err, out)
	}
	revoked := time.Now()
	for _, n := range c.Nodes {
		for {
			code, body := aclDo(t, "GET", n.URL()+"/api/v1/jobs", a, "")
			if code == http.StatusUnauthorized && strings.Contains(body, "revoked") {
				break
			}
			if time.Since(revoked) > time.Second {
				t.Fatalf("%s still answers team-a's revoked token %s after a second: %d %s", n.Name, aAccessor, code, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("revoked token refused on all %d nodes %s after the revoke returned", len(c.Nodes), time.Since(revoked).Round(time.Millisecond))
}
