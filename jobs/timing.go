package jobs

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// MaxRetryDelay caps the exponential backoff between attempts of a run.
const MaxRetryDelay = time.Hour

// Schedule builds the job's full schedule: its expressions, evaluated in
// its time zone, with its daylight-saving policy.
func (s *Spec) Schedule() (*Schedule, error) {
	return NewSchedule(s.Schedules, s.Timezone, s.DST)
}

// JitterFor returns the delay, in [0, Jitter), between the scheduled time
// of the job's run and its dispatch. It is derived from the run's identity
// alone, so every node computes the same value and anyone can recompute it:
// the first 8 bytes of SHA-256(RunID(name, scheduled)), read big-endian,
// modulo Jitter in whole milliseconds (nanoseconds below 1ms). The
// scheduled time itself, the run's identity, does not move.
func (s *Spec) JitterFor(scheduled time.Time) time.Duration {
	j := s.Jitter.D()
	if j <= 0 {
		return 0
	}
	sum := sha256.Sum256([]byte(RunID(s.Name, scheduled)))
	h := binary.BigEndian.Uint64(sum[:8])
	unit := time.Millisecond
	if j < unit {
		unit = time.Nanosecond
	}
	return time.Duration(h%uint64(j/unit)) * unit
}

// RetryDelay returns how long to wait before attempt n+1 of a run after
// attempt n (n >= 1) failed: Backoff doubled for each earlier retry,
// at most MaxRetryDelay.
func (s *Spec) RetryDelay(n int) time.Duration {
	d := s.Backoff.D()
	if d <= 0 {
		d = DefaultBackoff
	}
	for i := 1; i < n && d < MaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, MaxRetryDelay)
}
