package replicated

// What each version of the log format changed is the doc of its gate below.
// The FSM reads every rule that changed through its gate's name, never
// through a bare number: an entry of version V is applied by the rules of
// the gates at or below V. The files named below are the FSM's, in
// scheduler/fsm.

// Log versions that changed a rule, by name.
const (
	// VersionDecideInApply (2): a grant decides uniqueness and overlap inside
	// Apply (forbid records a skip, replace cancels the open attempts in
	// the same entry, force overrides and is audited); notes and audit
	// entries take only known kinds, and a store_refused note counts in
	// stale_refused and fences the attempt it concerns; snapshots carry
	// their version. Version 1 entries were written before versions: the
	// leader decided overlap before proposing a grant.
	VersionDecideInApply = 2
	// VersionBatches (3): a batch grant (op "grants", sharing its token where
	// the runs' keys cannot meet, batch.go); a group of completions (op
	// "completes"); a completion records when the worker received the
	// dispatch (Attempt.AcceptedAt).
	VersionBatches = 3
	// VersionAhead (4): a grant may be marked ahead (proposed before the run's
	// fire time); Apply refuses it (ErrNotAhead) while the job has an open
	// run and overlap forbid or replace (pregrant.go).
	VersionAhead = 4
	// VersionSkipRanges (4): several ranges of skipped fire times in one entry
	// (op "skip_ranges", batch.go).
	VersionSkipRanges = 4
	// VersionStdoutTail (4): a completion records the end of stdout when it was
	// not published (Attempt.StdoutTail, output.go).
	VersionStdoutTail = 4
	// VersionClockSkew (4): an audit entry may be of kind clock_skew (scheduler/skewmonitor.go).
	VersionClockSkew = 4
	// VersionFollow (4): an entry that ends attempts or finishes runs records
	// the notifications due (notify.go) and decides the runs of the jobs
	// that follow them (after.go), granting them in that entry with the
	// workers its follow field names; op "notified" records deliveries.
	VersionFollow = 4
	// VersionBackfill (4): op "backfill" queues a job's fire times that have no
	// run and are after its retained horizon; a grant with trigger
	// backfill is admitted only for a queued time and while the job has
	// room for another backfill run (backfill.go).
	VersionBackfill = 4
	// VersionRelease (4): op "release", an operator ends an open attempt's
	// lease now; the attempt ends lost and its run is retried by its
	// policy (release.go).
	VersionRelease = 4
	// VersionGroups (4): a grant of a concurrency group's job takes a place,
	// waits in the group's queue, or is skipped when it is full; every
	// entry admits the oldest waiters while places are free; op "admit"
	// grants an admitted run's first attempt (groups.go).
	VersionGroups = 4
	// VersionTermStart (4): an entry that mints a token in an epoch whose
	// election entry is not yet applied is refused whole
	// (ErrTermNotStarted, termstart.go).
	VersionTermStart = 4
	// VersionNeverStarted (5): an expiry may carry the leader's word that the
	// attempt never started; Apply marks it so only for an attempt granted
	// in the entry's epoch after its election entry, and such an attempt
	// does not count against the job's retries (startconfirm.go); so may a
	// completion, on the word of its worker. The state records the index
	// of the last election entry.
	VersionNeverStarted = 5
	// VersionStartBatches (6): several start reports in one entry (op "starts",
	// starts.go).
	VersionStartBatches = 6
	// VersionLeaderRendersKeys (7): a run that follows its parents takes the
	// output key its leader rendered, sent in the entry's follow field,
	// and is skipped if there is none; Apply executes no template
	// (after.go).
	VersionLeaderRendersKeys = 7
	// VersionPreStartLease (8): an expiry may say that the short lease an
	// attempt holds until its start ran out (ExpireCmd.BeforeStart);
	// Apply refuses it unless DecidePreStartExpiry allows it, and
	// marks the attempt never started (prestart.go).
	VersionPreStartLease = 8
	// VersionJobsDiff (8): op "set_jobs_diff" changes the job set by
	// difference, against the set whose hash it names (jobsdiff.go).
	VersionJobsDiff = 8
	// VersionHTTPStatus (8): a completion of an HTTP job's attempt records the
	// response's status and size (Attempt.HTTPStatus, ResponseBytes).
	VersionHTTPStatus = 8
	// VersionNamespaces (9): a job may belong to a namespace (jobs.Spec
	// Namespace, its Name qualified "NS:name"); its output keys and token
	// scope lie under "ns/NS/" (jobs/namespace.go). A job set of an
	// older entry holds no namespaced job: Apply refuses one
	// (namespaces.go). A server of version 8 would read such a job's
	// name as a plain one and scope its tokens elsewhere, so it must stop
	// at the first entry of version 9, as it does.
	VersionNamespaces = 9
	// VersionACL (10): op "acl" changes the access control state (State.ACL:
	// policies, and tokens as hashes of their secrets): bootstrap, policy
	// upsert or delete, token create or revoke, each decided by
	// acl.Decide inside Apply (a second bootstrap, a token for an unknown
	// policy, a policy that names an unknown capability are refused
	// whole). A server of version 9 does not know the op, so it stops at
	// the first entry of version 10, as it does: upgrade every server
	// before anyone bootstraps ACLs. A backfill entry may name who asked
	// (BackfillCmd.By), which its audit entry then says; an audit entry
	// may be of kind restored (a snapshot restored, and by whom).
	VersionACL = 10
	// VersionStartsInLog (11): an attempt granted ahead of its fire time
	// has its start confirmed by an entry before its worker may begin (op
	// "confirm_starts", Attempt.StartInLog and StartConfirmed). An expiry
	// before the start (DecidePreStartExpiry) and the word that an
	// attempt never started (DecideNeverStarted) are then believed for
	// such an attempt whatever term granted it, while the state shows no
	// confirmation: a new leader takes over the run its dead predecessor
	// granted ahead on the short lease, not after a whole lease_ttl
	// (prestart.go). A server of version 10 does not know the op and
	// stops at the first entry of version 11, as it does.
	VersionStartsInLog = 11
)
