// Package replicated holds what a cluster replicates, as it is written
// down: the entries of the Raft log (Command, one payload per op, and
// Completion, which workers report) and the state a snapshot holds
// (State), with the checks a snapshot must pass before a cluster installs
// it (CheckState) and the log version this binary reads and writes.
//
// It decides nothing: package fsm applies the entries to the state, and
// its Decide* functions say what they mean. Keeping the formats apart lets
// a worker, the transport and the API speak them without importing the
// state machine.
package replicated
