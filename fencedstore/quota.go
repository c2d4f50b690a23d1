package fencedstore

import "fmt"

// Quota bounds what the keys under a job token's directory scope may hold
// (store.quota.keys and store.quota.bytes), so that one job cannot take
// the store's disk. The HTTP handler sets it on the writes of jobs'
// own tokens; a store checks it in the same atomic step as the write,
// so it holds however many processes write the store at once.
type Quota struct {
	// Job is the token's job, for messages.
	Job string
	// Prefix is the scope whose keys are counted: a directory prefix
	// ending in "/".
	Prefix string
	// Keys and Bytes are the most keys, and body bytes, under Prefix.
	Keys, Bytes int64
}

// Usage is what the keys under a quota's prefix hold before a call: how
// many (tombstones not counted), their bodies' bytes, and the size of the
// call's own key's body if the key is one of them, else -1.
type Usage struct {
	Keys, Bytes, KeySize int64
}

// CheckQuota refuses (ErrQuota) a call on a key under q.Prefix that would
// take the keys beyond q, counting the call as applied: a publish of
// body bytes replaces its key's body; an establish adds no bytes, but a
// new key all the same, since every decision keeps the key's history.
func CheckQuota(q Quota, u Usage, publish bool, body int64) error {
	keysAfter, bytesAfter := u.Keys, u.Bytes
	if u.KeySize < 0 {
		keysAfter++
	}
	if publish {
		bytesAfter += body - max(u.KeySize, 0)
	}
	switch {
	case keysAfter > q.Keys:
		return fmt.Errorf("%w: scope %q of job %s holds %d keys; the limit is %d (store.quota.keys)", ErrQuota, q.Prefix, q.Job, u.Keys, q.Keys)
	case bytesAfter > q.Bytes:
		return fmt.Errorf("%w: scope %q of job %s holds %d bytes, %d with this body; the limit is %d (store.quota.bytes)", ErrQuota, q.Prefix, q.Job, u.Bytes, bytesAfter, q.Bytes)
	}
	return nil
}

// QuotaSegment is what quota-checked writes are serialized on: the first
// path segment of the quota's prefix ("reports/" for "reports/" and
// "reports/monthly/"), since two overlapping scopes always share it.
func QuotaSegment(prefix string) string {
	for i := 0; i < len(prefix); i++ {
		if prefix[i] == '/' {
			return prefix[:i+1]
		}
	}
	return prefix
}
