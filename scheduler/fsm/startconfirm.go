package fsm

import (
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Start confirmation (log version 5). A lease that runs out tells the
// leader only that the worker went quiet, not whether the process ever
// started. So a worker asks the leader before it starts one (a renewal
// with Start, sent 25-100 ms before the fire time) and starts only
// once the leader answered Started; it says in every renewal batch that
// it works this way (Renewal.Confirming), so a leader never takes an
// older worker's silence for a start that did not happen. A leader loop
// confirms only while its election entry is the last one applied
// (errStaleLoop in scheduler).
//
// When a lease runs out unconfirmed, the leader says so in the expiry
// (ExpireCmd.NeverStarted) and the FSM marks the attempt never started,
// not counted against the job's retries, if no leader can have confirmed
// its start (DecideNeverStarted, StartUnconfirmed): it was granted in
// the expiring leader's own term after its election entry (that loop
// remembers every start it confirmed, and a later leader applies this
// expiry before it confirms anything), or, since log version 11, it was
// granted ahead and the log shows no confirmation (prestart.go). A
// worker that gives an attempt up before starting it says so in its
// completion (Completion.NeverStarted), and the FSM takes its word while
// the lease is its own.

// maxNeverStarted bounds the attempts of one run that do not count
// against its job's retries: a run whose workers keep dying before they
// start it ends after that many, plus the retries its job allows.
const maxNeverStarted = 3

// Expiry is what Apply knows of an expiry's entry: its epoch (Entry), the
// last election entry applied (epoch Elected, at ElectedIndex), version.
type Expiry struct {
	Entry, Elected, ElectedIndex uint64
	Version                      int
}

// DecideNeverStarted reports whether the expiry e of attempt a of run r
// may mark it never started on the leader's word: no leader can have let
// a start (StartUnconfirmed), and r has fewer than maxNeverStarted such
// attempts already. It is pure, so every replica decides the same.
func DecideNeverStarted(r jobs.Run, a jobs.Attempt, e Expiry) bool {
	return StartUnconfirmed(a, e) && mayGoUncounted(r)
}

// StartUnconfirmed reports whether, as of expiry e, no leader can have
// confirmed a's start: the log shows none (an attempt granted ahead,
// version 11), or a was granted in e's epoch after its election entry,
// by the loop that proposes e and remembers every start it confirmed.
func StartUnconfirmed(a jobs.Attempt, e Expiry) bool {
	if a.StartInLog && e.Version >= replicated.VersionStartsInLog {
		return !a.StartConfirmed
	}
	return GrantedSinceElection(a.Token, e.Entry, e.Elected, e.ElectedIndex)
}

// mayGoUncounted reports whether another of r's attempts may be marked
// never started: fewer than maxNeverStarted are.
func mayGoUncounted(r jobs.Run) bool { return neverStarted(r) < maxNeverStarted }

// CountedAttempts is how many of r's attempts count against its job's
// retries: all but those that never started.
func CountedAttempts(r jobs.Run) int {
	return len(r.Attempts) - neverStarted(r)
}

func neverStarted(r jobs.Run) int {
	n := 0
	for _, a := range r.Attempts {
		if a.NeverStarted {
			n++
		}
	}
	return n
}

// GrantedSinceElection reports whether the attempt of token tok was
// granted in epoch entry after its election entry (of epoch elected, at
// electedIndex): by the leader loop that proposes an entry of that epoch.
func GrantedSinceElection(tok jobs.Fence, entry, elected, electedIndex uint64) bool {
	return tok.Epoch == entry && entry == elected && tok.Seq > electedIndex
}
