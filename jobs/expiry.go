package jobs

import "time"

// TokenExpiryMargin is how long an attempt's fence token stays good beyond
// the attempt's own bounds (its lease TTL to start, its timeout to run). It
// covers what those bounds do not: clock skew between the leader that
// stamped the grant time and the node that serves the store, the grace
// between SIGTERM and SIGKILL when the timeout strikes, and the worker's
// retries of its publish while the store is unreachable (30 s at most).
const TokenExpiryMargin = 2 * time.Minute

// TokenExpiry returns when the fence token of an attempt of s granted at
// grantedAt stops being good: grantedAt + timeout + lease TTL +
// TokenExpiryMargin, with the defaults for an unset timeout or TTL. It is
// the one place this is computed: the worker signs it into the job's
// FENCECRON_TOKEN and sends it with its own store calls, and the store
// refuses a write it decides later as expired. An attempt cannot publish
// legitimately after it: it must have started within its lease and ended
// within its timeout. A superseded attempt's token so cannot write even to
// keys no newer attempt has touched (fencing alone is per key).
func (s *Spec) TokenExpiry(grantedAt time.Time) time.Time {
	timeout := s.Timeout.D()
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return grantedAt.Add(timeout + s.Lease() + TokenExpiryMargin)
}
