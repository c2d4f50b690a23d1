//go:build !fencecron_faults

package faults

import (
	"errors"
	"strings"

	"github.com/fencecron/fencecron/jobs"
)

// Built reports whether this build has fault injection (see
// BuildTag): it has not.
const Built = false

// Faults is empty in a build without fault injection: every hook does
// nothing.
type Faults struct{}

// errNoFaults refuses FENCECRON_FAULTS in a build without fault injection:
// a node must not run as if faults were injected when they are not, nor
// the other way round.
var errNoFaults = errors.New("this fencecron was built without fault hooks, which exist only in test builds (go build -tags " + BuildTag + "): unset FENCECRON_FAULTS")

// ParseFaults accepts only "" (and returns nil): there are no faults to
// inject.
func ParseFaults(s string) (*Faults, error) {
	if strings.TrimSpace(s) != "" {
		return nil, errNoFaults
	}
	return nil, nil
}

// DropDispatchReply returns nil: no reply is dropped.
func DropDispatchReply(*Faults) error { return nil }

// StopBeforePublish returns false: no process is stopped.
func StopBeforePublish(*Faults, int) bool { return false }

// DropRenewReply returns nil: no reply is dropped.
func DropRenewReply(*Faults, *int) error { return nil }

// ClockOf returns the system clock: a release build's wall clock cannot
// be moved.
func ClockOf(*Faults) jobs.Clock { return jobs.SystemClock{} }

// TuningOf returns the zero Tuning: a release build has the defaults.
func TuningOf(*Faults) Tuning { return Tuning{} }
