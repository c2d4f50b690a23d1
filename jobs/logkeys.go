package jobs

import (
	"strings"

	"github.com/fencecron/fencecron/fencedstore"
)

// Log keys of the lines about a run. Every node names a run the same way
// in its log, so a log pipeline can gather one run across the leader
// that granted it, the worker that ran it and the store node that judged
// its writes, and tell its attempts apart by token.
// The store node's lines use them too (fencedstore.SignedToken.LogArgs).
const (
	LogRunID   = fencedstore.LogRunID
	LogAttempt = fencedstore.LogAttempt
	LogToken   = fencedstore.LogToken
)

// LogArgs are the key-value pairs that name attempt a (its run, itself,
// its token) in a log line, followed by more.
func (a Attempt) LogArgs(more ...any) []any {
	args := make([]any, 0, 6+len(more)) // one allocation: grants log this on the hot path
	args = append(args, LogRunID, runOf(a.ID), LogAttempt, a.ID, LogToken, a.Token)
	return append(args, more...)
}

// runOf is the run of attempt id (<run id>.<number>), parsed without
// allocating.
func runOf(id string) string {
	if i := strings.LastIndexByte(id, '.'); i > 0 {
		return id[:i]
	}
	return id
}

// AttemptLogArgs names an attempt known only by its id (its run and
// itself), followed by more.
func AttemptLogArgs(id string, more ...any) []any {
	args := make([]any, 0, 4+len(more))
	args = append(args, LogRunID, runOf(id), LogAttempt, id)
	return append(args, more...)
}
