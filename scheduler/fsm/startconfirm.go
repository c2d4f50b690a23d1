package fsm

import (
	"github.com/fencecron/fencecron/jobs"
)

// Start confirmation (log version 5). A lease that runs out tells the
// leader only that the worker went quiet, not whether the attempt's
// process ever started; so every expiry counted against the job's
// retries, and a run granted ahead whose worker died before the fire time
// ended lost when its job had no retries left, though nothing had run.
//
// So a worker asks the leader before it starts a process: the renewal it
// sends just before the start carries Start, and the process starts only
// once the leader has answered Started. The leader remembers the answer
// with the lease, for its term. A worker says, in every batch of
// renewals, that it confirms its starts this way (Renewal.Confirming), so
// that a leader never takes an older worker's silence for a start that
// did not happen.
//
// A worker that gives an attempt up before starting it (it shuts down
// before the fire time) says so in its completion (Completion.
// NeverStarted); the FSM takes the word of the attempt's own worker, while
// the lease is still its own, in the same way.
//
// When a lease runs out and the leader never confirmed its start, though
// the worker confirms starts, the leader says so in the expiry
// (ExpireCmd.NeverStarted), and the FSM marks the attempt never started:
// it does not count against the job's retries. The FSM believes the
// leader only about attempts granted in the leader's own term after its
// election entry (DecideNeverStarted): any confirmation of such an
// attempt was given by that same leader loop, which remembers it, or by
// a leader of a later term, which applies every committed entry of this
// term, this expiry included, before it confirms anything, and so finds
// the attempt ended. An attempt granted by an earlier leader may have
// been confirmed by it, so its expiry counts, as before. No confirmation
// is a Raft entry: the one extra renewal of a run granted ahead costs a
// round trip to the leader, sent startConfirmLead before the fire time
// so that it does not make the run late.
//
// Confirming early is safe: a worker that dies between the confirmation
// and the start costs a counted retry, as every expiry did before. A
// worker that cannot get a confirmation (no leader) waits and asks again
// until its lease runs out; it never starts without one, so a takeover
// granted for free never runs beside it. The price: a leader that dies
// just before a fire time makes that run late by the failover.
//
// A leader loop confirms a start only while its election entry is the
// last one applied (errStaleLoop): a loop that outlived its term could
// otherwise confirm the start of an attempt a newer leader granted, and
// that leader, not knowing, would take it over for free.
//
// A leader of an older version refuses a renewal with starts (an unknown
// field) and gets it again without them; it answers Held without
// Started, and the worker starts, as it did with that leader before. A
// leader of this version that gets a renewal without Confirming counts
// the attempt as started: such a worker may start on any Held.

// maxNeverStarted bounds the attempts of one run that do not count
// against its job's retries: a run whose workers keep dying before they
// start it ends after that many, plus the retries its job allows.
const maxNeverStarted = 3

// DecideNeverStarted reports whether the expiry of attempt a of run r, in
// an entry of epoch entry, may mark it never started on the leader's
// word: a was granted in that epoch after its election entry (the last
// one applied, of epoch elected at index electedIndex), and r has fewer
// than maxNeverStarted such attempts already. It is pure, so every
// replica decides the same.
func DecideNeverStarted(r jobs.Run, a jobs.Attempt, entry, elected, electedIndex uint64) bool {
	return GrantedSinceElection(a.Token, entry, elected, electedIndex) && mayGoUncounted(r)
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
