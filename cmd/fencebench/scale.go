package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// fencebench scale: how the job set's size weighs on a cluster. A real
// three-server cluster gets N jobs through `fencecron apply`, as a user
// would give them; what every replica does with a set of that size (its
// snapshot, a restore, the cost of one grant) is measured on the same
// set in this process, through the FSM itself.

func runScale(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, c := benchFlags("scale", stderr)
	sizes := fs.String("jobs", "10000,100000", "job set sizes to measure, comma separated")
	settle := fs.Duration("settle", 10*time.Second, "how long after the apply to read each node's steady RSS")
	cluster := fs.Bool("cluster", true, "measure the three-server cluster too (-cluster=false: the dev node only)")
	bin, dir, cleanup, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	defer cleanup()

	// With -compare, each size is measured with both binaries one after
	// the other, so that both meet about the same load on a shared
	// machine.
	bins, labels := c.binaries(bin)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if len(bins) > 1 {
		fmt.Fprint(tw, "binary\t")
	}
	fmt.Fprintln(tw, "jobs\tdev: apply\tCPU apply (CLI)\tCPU dev\tRSS dev\tone change\tits CPU (CLI / dev)\tits log entries\tdata grew\tcluster: apply\ton every server\tCPU apply (CLI)\tCPU leader\tRSS leader\tRSS followers (max)\tsnapshot\tsnapshot time\trestore time\tper fire\t/jobs page\t/jobs time\tsearch time\t")
	for _, field := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || n < 1 || n > jobs.MaxJobs {
			return fmt.Errorf("-jobs: bad size %q (1 to %d)", field, jobs.MaxJobs)
		}
		for i, b := range bins {
			fmt.Fprintf(stderr, "measuring %d jobs: %s\n", n, labels[i])
			r, err := measureScale(ctx, b, filepath.Join(dir, fmt.Sprintf("scale-%d-%d", n, i)), n, *settle, *cluster, stderr)
			if err != nil {
				return fmt.Errorf("%s, %d jobs: %w", labels[i], n, err)
			}
			if len(bins) > 1 {
				fmt.Fprintf(tw, "%s\t", labels[i])
			}
			r.print(tw, n, *cluster)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "dev: one `fencecron dev` node, the same apply, its CPU and its RSS after -settle;"+
		" then one change: one job's schedule in the middle of the file edited in place, applied again, then the file as it was, and so on (the command's cache of the file, applycache, is the run's own), "+strconv.Itoa(oneChanges)+" applies of one change each: what the command waited (median, and the range), the median of both CPUs, the job-set entries they appended to the Raft log in all and their bytes, and how much the node's data directory grew. cluster: three servers on loopback. apply: `fencecron apply FILE` against the leader, parse to answer;"+
		" on every server: until each reports the set; CPU: user+system time of the apply process and of the leader"+
		" from the apply's start to every server having the set (on an idle machine the wall time is close to their sum);"+
		" RSS: VmRSS after -settle;"+
		" snapshot, restore, per fire (one grant applied to the FSM): in this process on the same set;"+
		" /jobs: the Jobs page's first page from the leader; search: /jobs?q=...&state=never")
	return nil
}

// print writes r as a row of the table; without the cluster, its
// columns are "-".
func (r scaleResult) print(tw io.Writer, n int, cluster bool) {
	one := r.dev.one
	fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s (%s–%s)\t%s / %s\t%d for %d, %d B\t%s\t", n, secs(r.dev.apply), secs(r.dev.cliCPU), secs(r.dev.nodeCPU), mib(r.dev.rss),
		secs(one.apply.P50), secs(one.apply.Min), secs(one.apply.Max), secs(one.cliCPU), secs(one.nodeCPU), one.entries, oneChanges, one.entryBytes, kib(int(one.dataGrowth)))
	if !cluster {
		fmt.Fprintln(tw, strings.Repeat("-\t", 13))
		return
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", secs(r.apply), secs(r.replicated), secs(r.cliCPU), secs(r.leaderCPU),
		mib(r.rssLeader), mib(r.rssFollowers), mib(int64(r.snapshotBytes)), secs(r.snapshot), secs(r.restore),
		fmt.Sprintf("%.1f µs", float64(r.perFire)/float64(time.Microsecond)), kib(r.pageBytes), ms(r.page), ms(r.search))
}

type scaleResult struct {
	dev                     devResult
	apply, replicated       time.Duration
	cliCPU, leaderCPU       time.Duration
	rssLeader, rssFollowers int64
	snapshotBytes           int
	snapshot, restore       time.Duration
	perFire                 time.Duration
	pageBytes               int
	page, search            time.Duration
}

// scaleJobs writes n jobs as a file `fencecron apply` takes: daily at
// spread minutes, so that about n/1440 fire each minute.
func scaleJobs(n int) []byte {
	var b bytes.Buffer
	b.WriteString("jobs:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: job-%06d\n    schedule: \"%d %d * * *\"\n    command: [\"/bin/true\"]\n", i, i%60, (i/60)%24)
	}
	return b.Bytes()
}

// devResult is the apply to a single `fencecron dev` node, and then the
// apply of the same file with one job changed.
type devResult struct {
	apply, cliCPU, nodeCPU time.Duration
	rss                    int64
	one                    oneChange
}

// oneChange is what changing one job of a set costs, over oneChanges
// changes: the wait (its summary) and the median CPUs, the job-set
// entries they appended to the Raft log, and how much the node's data
// directory grew.
type oneChange struct {
	apply               Summary
	cliCPU, nodeCPU     time.Duration
	entries, entryBytes int
	dataGrowth          int64
}

// oneChanges is how many one-job changes are measured, one after the
// other: on two busy cores one apply's wait varies by more than most
// changes to the code move it.
const oneChanges = 5

// startDev starts a `fencecron dev` node with its data and log in dir, on
// free loopback ports, with args added; stop kills it and waits, once
// however often it is called.
func startDev(bin, dir string, args ...string) (dev *exec.Cmd, addr string, stop func(), err error) {
	ports, err := localcluster.FreePorts(3)
	if err != nil {
		return nil, "", nil, err
	}
	addr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	logf, err := os.Create(filepath.Join(dir, "dev.log"))
	if err != nil {
		return nil, "", nil, err
	}
	dev = exec.Command(bin, append([]string{"dev", "-data", filepath.Join(dir, "dev"), "-http", addr,
		"-raft-port", strconv.Itoa(ports[1]), "-gossip-port", strconv.Itoa(ports[2])}, args...)...)
	dev.Stdout, dev.Stderr = logf, logf
	if err := dev.Start(); err != nil {
		logf.Close()
		return nil, "", nil, err
	}
	return dev, addr, sync.OnceFunc(func() {
		dev.Process.Kill()
		dev.Wait()
		logf.Close()
	}), nil
}

// measureDev applies file to a fresh `fencecron dev` node.
func measureDev(ctx context.Context, bin, dir, file string, settle time.Duration, stderr io.Writer) (devResult, error) {
	var r devResult
	dev, addr, stop, err := startDev(bin, dir)
	if err != nil {
		return r, err
	}
	defer stop()
	err = localcluster.Until(30*time.Second, func() error {
		_, _, err := timedGet("http://" + addr + "/readyz")
		return err
	})
	if err != nil {
		return r, fmt.Errorf("dev node not ready: %w", err)
	}
	cpu0, err := cpuTime(dev.Process.Pid)
	if err != nil {
		return r, err
	}
	if r.apply, r.cliCPU, err = timedApply(ctx, bin, addr, file, "dev", stderr); err != nil {
		return r, err
	}
	cpu1, err := cpuTime(dev.Process.Pid)
	if err != nil {
		return r, err
	}
	r.nodeCPU = cpu1 - cpu0
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(settle):
	}
	if r.rss, err = vmRSS(dev.Process.Pid); err != nil {
		return r, err
	}
	r.one, err = measureOneChange(ctx, bin, addr, dev.Process.Pid, filepath.Join(dir, "dev"), file, stop, stderr)
	return r, err
}

// measureOneChange changes one job's schedule in file, a job in its
// middle, as a user edits their file, and applies it to the dev node at
// addr that holds file's set; then it puts the schedule back and applies
// again, and so on, oneChanges applies in all, each a change of one job.
// Then it stops the node (stop) and reads the job-set entries the applies
// appended from its Raft log in data. file is as it was at the end.
func measureOneChange(ctx context.Context, bin, addr string, pid int, data, file string, stop func(), stderr io.Writer) (oneChange, error) {
	var r oneChange
	b, err := os.ReadFile(file)
	if err != nil {
		return r, err
	}
	defer os.WriteFile(file, b, 0o644)
	// The first schedule after the middle, "M H * * *", is moved a
	// minute.
	const key = `schedule: "`
	at := bytes.Index(b[len(b)/2:], []byte(key))
	if at < 0 {
		return r, fmt.Errorf("%s has no schedule after its middle", file)
	}
	at += len(b)/2 + len(key)
	field, _, _ := bytes.Cut(b[at:], []byte(" "))
	minute, err := strconv.Atoi(string(field))
	if err != nil {
		return r, fmt.Errorf("%s: the schedule after its middle does not start with a minute", file)
	}
	changed := slices.Concat(b[:at], []byte(strconv.Itoa((minute+1)%60)), b[at+len(field):])
	before, err := sampleDev(addr, data, pid)
	if err != nil {
		return r, err
	}
	after := before
	var waits, cliCPU, nodeCPU []time.Duration
	for i := range oneChanges {
		content := changed
		if i%2 == 1 {
			content = b
		}
		if err := os.WriteFile(file, content, 0o644); err != nil {
			return r, err
		}
		wait, cpu, err := timedApply(ctx, bin, addr, file, "dev", stderr)
		if err != nil {
			return r, err
		}
		prev := after
		if after, err = sampleDev(addr, data, pid); err != nil {
			return r, err
		}
		waits, cliCPU, nodeCPU = append(waits, wait), append(cliCPU, cpu), append(nodeCPU, after.cpu-prev.cpu)
	}
	r.apply = summarize(waits)
	r.cliCPU, r.nodeCPU = summarize(cliCPU).P50, summarize(nodeCPU).P50
	r.dataGrowth = after.data - before.data
	stop() // bolt lets one process at a time open the log
	r.entries, r.entryBytes, err = jobSetEntries(filepath.Join(data, "raft", "raft.db"), before.log.index+1, after.log.index)
	return r, err
}

// devSample is where the dev node at an address stood: its CPU so far,
// its Raft log, and the size of its data directory.
type devSample struct {
	cpu  time.Duration
	log  logState
	data int64
}

// sampleDev reads a devSample of the dev node at addr (process pid, data
// directory data). The node's CPU is read first, so an apply's CPU, from
// one sample to the next, holds one answer to /metrics too: a
// millisecond, under the 10 ms the kernel counts CPU in.
func sampleDev(addr, data string, pid int) (s devSample, err error) {
	if s.cpu, err = cpuTime(pid); err != nil {
		return s, err
	}
	if s.log, err = readLog("http://" + addr); err != nil {
		return s, err
	}
	s.data, err = localcluster.DirSize(data)
	return s, err
}

// timedApply runs `fencecron apply -addr addr file`, as a user would:
// what it waited, and its CPU. The command's cache of the file
// (cmd/internal/applycache) is one of the run's own, beside the file:
// cache names which, so that the dev node's applies do not warm the
// cluster's.
func timedApply(ctx context.Context, bin, addr, file, cache string, stderr io.Writer) (wait, cpu time.Duration, err error) {
	start := time.Now()
	cmd := exec.CommandContext(ctx, bin, "apply", "-addr", addr, file)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(filepath.Dir(file), "cli-cache-"+cache))
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("apply %s to %s: %w", filepath.Base(file), addr, err)
	}
	return time.Since(start), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// jobSetEntries counts the job-set entries (set_jobs, set_jobs_diff) with
// indexes first to last in the Raft log at path, and their bytes.
func jobSetEntries(path string, first, last uint64) (n, size int, err error) {
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: 5 * time.Second}})
	if err != nil {
		return 0, 0, err
	}
	defer store.Close()
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return 0, 0, fmt.Errorf("raft log entry %d: %w", i, err)
		}
		var head struct {
			Op string `json:"op"`
		}
		if l.Type != raft.LogCommand || json.Unmarshal(l.Data, &head) != nil {
			continue
		}
		if head.Op == replicated.OpSetJobs || head.Op == replicated.OpSetJobsDiff {
			n, size = n+1, size+len(l.Data)
		}
	}
	return n, size, nil
}

func measureScale(ctx context.Context, bin, dir string, n int, settle time.Duration, cluster bool, stderr io.Writer) (scaleResult, error) {
	var r scaleResult
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	file := filepath.Join(dir, "jobs.yaml")
	if err := os.WriteFile(file, scaleJobs(n), 0o644); err != nil {
		return r, err
	}
	var err error
	if r.dev, err = measureDev(ctx, bin, dir, file, settle, stderr); err != nil {
		return r, err
	}
	if !cluster {
		return r, nil
	}
	cl, err := localcluster.Start(localcluster.Options{Binary: bin, Dir: dir, Servers: 3, Profile: "default"})
	if err != nil {
		return r, err
	}
	defer cl.Stop()
	a, err := waitAgreed(cl, 60*time.Second)
	if err != nil {
		return r, err
	}
	leader := cl.Node(a.Leader)

	// The apply, as a user runs it.
	cpu0, err := cpuTime(leader.Pid())
	if err != nil {
		return r, err
	}
	start := time.Now()
	if r.apply, r.cliCPU, err = timedApply(ctx, bin, strings.TrimPrefix(leader.URL(), "http://"), file, "cluster", stderr); err != nil {
		return r, err
	}
	err = localcluster.UntilEvery(2*time.Minute, 100*time.Millisecond, func() error {
		for _, s := range cl.Servers() {
			st, err := s.Status()
			if err != nil {
				return err
			}
			if st.Jobs.Count != n {
				return fmt.Errorf("%s has %d jobs", s.Name, st.Jobs.Count)
			}
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	r.replicated = time.Since(start)
	cpu1, err := cpuTime(leader.Pid())
	if err != nil {
		return r, err
	}
	r.leaderCPU = cpu1 - cpu0

	// The pages, from the leader.
	if r.pageBytes, r.page, err = timedGet(leader.URL() + "/jobs"); err != nil {
		return r, err
	}
	if _, r.search, err = timedGet(leader.URL() + "/jobs?q=job-0999&state=never"); err != nil {
		return r, err
	}

	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(settle):
	}
	for _, s := range cl.Servers() {
		rss, err := vmRSS(s.Pid())
		if err != nil {
			return r, err
		}
		if s == leader {
			r.rssLeader = rss
		} else {
			r.rssFollowers = max(r.rssFollowers, rss)
		}
	}
	cl.Stop()

	// What every replica does with a set this size.
	return measureFSM(r, n)
}

// measureFSM applies the same set to an FSM in this process, then times
// a snapshot, a restore, and a grant.
func measureFSM(r scaleResult, n int) (scaleResult, error) {
	specs := jobstest.Daily(n)
	f := fsm.NewFSM()
	index := uint64(1)
	apply := func(c map[string]any) error {
		b, err := json.Marshal(c)
		if err != nil {
			return err
		}
		f.Apply(&raft.Log{Term: 1, Index: index, Type: raft.LogCommand, Data: b})
		index++
		return nil
	}
	at := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	// The term's election entry precedes its grants, as a leader writes it.
	if err := apply(map[string]any{"v": replicated.LogVersion, "op": "elected", "elected": map[string]any{"node": "fencebench", "at": at}}); err != nil {
		return r, err
	}
	if err := apply(map[string]any{"v": replicated.LogVersion, "op": "set_jobs", "set_jobs": map[string]any{"jobs": specs, "source": "fencebench", "at": at}}); err != nil {
		return r, err
	}
	if got := f.JobSetInfo().Count; got != n {
		return r, fmt.Errorf("the FSM took %d jobs of %d", got, n)
	}

	// One grant per job of a sample spread over the set, as the leader
	// applies them when those jobs fire.
	const grants = 2000
	entries := make([][]byte, grants)
	for i := range entries {
		b, err := json.Marshal(map[string]any{"v": replicated.LogVersion, "op": "grant", "grant": map[string]any{
			"job": specs[i*n/grants].Name, "scheduled_at": at.Add(time.Minute), "worker": "w1", "trigger": "schedule", "at": at}})
		if err != nil {
			return r, err
		}
		entries[i] = b
	}
	start := time.Now()
	for _, b := range entries {
		f.Apply(&raft.Log{Term: 1, Index: index, Type: raft.LogCommand, Data: b})
		index++
	}
	r.perFire = time.Since(start) / grants
	if got := len(f.Runs(fsm.RunFilter{})); got != grants {
		return r, fmt.Errorf("%d of %d grants applied", got, grants)
	}

	start = time.Now()
	snap, err := f.Snapshot()
	if err != nil {
		return r, err
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		return r, err
	}
	r.snapshot, r.snapshotBytes = time.Since(start), sink.Len()

	g := fsm.NewFSM()
	start = time.Now()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		return r, err
	}
	r.restore = time.Since(start)
	if got := g.JobSetInfo().Count; got != n {
		return r, fmt.Errorf("the restored FSM has %d jobs of %d", got, n)
	}
	return r, nil
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "fencebench" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

var _ raft.SnapshotSink = (*memSink)(nil)

// timedGet fetches url, reading the body to its end.
func timedGet(url string) (int, time.Duration, error) {
	start := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	d := time.Since(start)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return int(n), d, err
}

// cpuTime is the user and system time a process has used so far.
func cpuTime(pid int) (time.Duration, error) {
	own, _, err := cpuTimes(pid)
	return own, err
}

// cpuTimes is the user and system time a process has used so far, and
// that of the children it has reaped (/proc/PID/stat, in clock ticks of
// 1/100 s).
func cpuTimes(pid int) (own, children time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The fields after the command name, which is in parentheses.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 15 {
		return 0, 0, fmt.Errorf("pid %d: unreadable stat", pid)
	}
	var ticks [4]int64 // utime, stime, cutime, cstime
	for i := range ticks {
		if ticks[i], err = strconv.ParseInt(f[11+i], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("pid %d: unreadable stat", pid)
		}
	}
	const tick = 10 * time.Millisecond
	return time.Duration(ticks[0]+ticks[1]) * tick, time.Duration(ticks[2]+ticks[3]) * tick, nil
}

// vmRSS is a process's resident set, in bytes.
func vmRSS(pid int) (int64, error) { return statusBytes(pid, "VmRSS") }

// rssAnon is the part of a process's resident set that is its own memory
// (heap, stacks), without the pages of files it maps, such as bolt's.
func rssAnon(pid int) (int64, error) { return statusBytes(pid, "RssAnon") }

// statusBytes reads one "NAME: N kB" line of /proc/PID/status.
func statusBytes(pid int, name string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("pid %d: no %s", pid, name)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
func mib(b int64) string          { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
func kib(b int) string            { return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10)) }
