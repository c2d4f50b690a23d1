package fencedstore

import "strings"

// Log keys of the lines about a run's writes: the same as package jobs
// uses on the leader and the worker, so the store node's refusals line
// up with the rest of the run in a log pipeline.
const (
	LogRunID   = "run_id"
	LogAttempt = "attempt"
	LogToken   = "token"
)

// LogArgs are the key-value pairs that name the attempt the token was
// handed to (its run, itself, the token), followed by more.
func (st SignedToken) LogArgs(more ...any) []any {
	run := st.Attempt
	if i := strings.LastIndexByte(run, '.'); i > 0 {
		run = run[:i] // an attempt id is <run id>.<number>
	}
	return append([]any{LogRunID, run, LogAttempt, st.Attempt, LogToken, st.Token}, more...)
}
