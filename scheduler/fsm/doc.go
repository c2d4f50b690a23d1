// Package fsm is the replicated state: what every node of a cluster must
// agree on, and the rules that decide it.
//
// Every change reaches the state as a Raft log entry, and FSM.Apply is
// the only code that changes it. Each op of the log is declared once, in
// the op table (ops.go): its name, the log version it appeared in, its
// payload and the function that applies it. Anything two nodes must agree
// on (whether a run is granted, skipped, admitted to its group, taken
// over, released, or never started) is decided inside Apply by a pure
// Decide* function that a test can call with plain values, never by a
// proposer reading the state and then proposing. That is why a grant's
// fence token is minted here, from the entry's term and index, and
// nowhere else.
//
// The package starts no process and opens no connection: the leader, the
// worker and notification delivery live in other packages and only
// propose entries or read what was applied.
package fsm
