package history

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// realisticRun is a finished run as a busy cluster archives them: times
// to the nanosecond from two clocks, one to three attempts on named
// workers, tokens from a long-lived epoch, and a stdout tail of log lines
// (the output was not published) or, for a failed attempt, a stderr tail
// and an error. The text varies with rng, so it compresses no better than
// real output does.
func realisticRun(rng *rand.Rand, job string, at time.Time, seq uint64) jobs.Run {
	r := jobs.Run{ID: jobs.RunID(job, at), Job: job, ScheduledAt: at, Trigger: "schedule",
		Output: "jobs/" + job + "/output"}
	n := 1
	switch p := rng.IntN(100); {
	case p < 5:
		n = 3
	case p < 20:
		n = 2
	}
	t := at
	for i := 1; i <= n; i++ {
		granted := t.Add(-time.Duration(rng.IntN(900_000_000)) - 100*time.Millisecond)
		if i > 1 {
			granted = t.Add(time.Duration(rng.IntN(50_000_000)))
		}
		accepted := granted.Add(time.Duration(200_000 + rng.IntN(3_000_000)))
		started := t.Add(time.Duration(rng.IntN(4_000_000)))
		ended := started.Add(time.Duration(rng.Int64N(int64(40 * time.Second))))
		a := jobs.Attempt{ID: jobs.AttemptID(r.ID, i), Number: i, Token: jobs.Fence{Epoch: 41, Seq: seq*3 + uint64(i)},
			Worker: fmt.Sprintf("worker-%d.dc1.example.internal", rng.IntN(12)), GrantedAt: granted, AcceptedAt: accepted,
			StartedAt: started, EndedAt: ended}
		code := 0
		if i < n || rng.IntN(100) < 3 {
			code = 1 + rng.IntN(2)
			a.State = jobs.Failed
			a.Error = fmt.Sprintf("exit code %d", code)
			a.StderrTail = logTail(rng, 80+rng.IntN(160), "ERROR")
		} else {
			a.State = jobs.Succeeded
			a.StoreOutcome = "applied"
			a.StoreVersion = seq + 1
			a.StdoutTail = logTail(rng, 100+rng.IntN(200), "INFO")
		}
		a.ExitCode = &code
		r.Attempts = append(r.Attempts, a)
		t = ended.Add(time.Second)
	}
	r.State = r.Attempts[n-1].State
	return r
}

// logTail returns about size bytes of log lines at level.
func logTail(rng *rand.Rand, size int, level string) string {
	words := []string{"copied", "files", "from", "bucket", "backup", "rows", "synced", "table", "users", "orders",
		"retrying", "connection", "timeout", "done", "skipped", "checksum", "ok", "uploaded", "to", "s3://archive"}
	var b strings.Builder
	for b.Len() < size {
		fmt.Fprintf(&b, "2026-07-01T12:%02d:%02d.%03dZ %s ", rng.IntN(60), rng.IntN(60), rng.IntN(1000), level)
		for range 3 + rng.IntN(6) {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
			if rng.IntN(3) == 0 {
				fmt.Fprintf(&b, "%d ", rng.IntN(100_000))
			}
		}
		b.WriteString("\n")
	}
	return b.String()[:size]
}
