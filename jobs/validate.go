package jobs

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
)

// Limits that Validate enforces.
const (
	MaxNameLen  = 63
	MaxRetries  = 100
	MinLeaseTTL = time.Second
)

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// dnsLabel reports whether s is lowercase letters, digits and '-',
// starting and ending with a letter or digit (what
// ^[a-z0-9]([a-z0-9-]*[a-z0-9])?$ matches). Every job's name is checked
// on every apply: a regexp's backtracking was a fifth of checking a
// spec.
func dnsLabel(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ValidName says whether name can name a job: a DNS label of at most
// MaxNameLen bytes.
func ValidName(name string) bool { return len(name) <= MaxNameLen && dnsLabel(name) }

// FenceEnvPrefix starts the names of the variables the worker sets for a
// job's process; a job's own env may not use it.
const FenceEnvPrefix = "FENCECRON_"

// FieldError is one problem with one field of a job spec. Field is the
// field's name as written in the config file ("timeout", "dst.spring",
// "" for the job as a whole); Index is the element of a list field the
// problem concerns, or -1.
type FieldError struct {
	Field string
	Index int
	// Key is the map key a problem with env or target concerns.
	Key string
	Msg string
}

func (e FieldError) Error() string {
	switch {
	case e.Field == "":
		return e.Msg
	case e.Index >= 0:
		return fmt.Sprintf("%s[%d]: %s", e.Field, e.Index, e.Msg)
	}
	return e.Field + ": " + e.Msg
}

// SpecError lists everything wrong with one job spec. It wraps
// ErrInvalidConfig.
type SpecError struct {
	Job      string
	Problems []FieldError
}

func (e *SpecError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Error()
	}
	return fmt.Sprintf("job %q: %s", e.Job, strings.Join(msgs, "; "))
}

// Unwrap returns ErrInvalidConfig.
func (e *SpecError) Unwrap() error { return ErrInvalidConfig }

// Limits are what a job is checked against besides its own fields: what
// the store its outputs go to accepts.
type Limits struct {
	// MaxBodyBytes is the store's cap on one body (store.max_body_bytes):
	// a job's max_output_bytes may not exceed it, nor may
	// DefaultMaxOutputBytes when the job leaves the field out. Zero checks
	// no cap.
	MaxBodyBytes int64
	// NoSMTP says the cluster has no SMTP server (the top-level notify:
	// section): a job may not notify by email.
	NoSMTP bool
}

// Validate checks every field of s against itself and against l, and
// returns a *SpecError listing all problems, or nil. Zero values that
// Normalize fills in are valid, and a spec is valid before Normalize if
// and only if it is after. It renders the output key template and checks
// the key with CheckKey, the store's own rule. It does not check what
// depends on other jobs (unique names: see CheckSet).
//
// It is the one validation of a job: the config parser reports its
// problems at their file:line:column, and the leader applies no job set
// that fails it.
func (s *Spec) Validate(l Limits) error {
	var errs fieldErrors
	s.checkNamespace(&errs)

	loc, zerr := LoadZone(s.Timezone)
	if zerr != nil {
		errs.bad("timezone", -1, "%v", zerr)
	}
	if len(s.Schedules) == 0 && len(s.After) == 0 {
		errs.bad("schedule", -1, "required: a cron expression, a descriptor such as @daily, or @every 90s (or after: [job, ...] to follow other jobs)")
	}
	errs = append(errs, checkAfter(s)...)
	errs = append(errs, checkNotify(s.Notify, l)...)
	schedOK := s.checkSchedules(&errs)
	s.checkAction(&errs, loc, zerr)
	s.checkEnvironment(&errs)

	if s.Output != "" {
		// A key's syntax does not depend on the zone: check it even when
		// the zone is wrong, in UTC.
		if zerr != nil {
			loc = time.UTC
		}
		if err := s.checkOutput(loc); err != nil {
			errs.bad("output", -1, "%v", err)
		}
	}

	s.checkLimits(&errs, l)
	s.checkPolicies(&errs)

	// Jitter that reaches the next fire time would let runs pile up.
	if schedOK && zerr == nil && s.Jitter > 0 {
		if sched, err := s.Schedule(); err == nil {
			if gap := minGap(sched); gap > 0 && s.Jitter.D() >= gap {
				errs.bad("jitter", -1, "%s: want less than the shortest interval between fire times (%s)", s.Jitter, gap)
			}
		}
	}
	errs = append(errs, s.checkGroup()...)

	if len(errs) == 0 {
		return nil
	}
	return &SpecError{Job: s.Name, Problems: errs}
}

// fieldErrors collects a spec's problems in the order they are found,
// which is the order SpecError reports them in: Validate's checks are
// split into steps, but they still read as one list.
type fieldErrors []FieldError

func (errs *fieldErrors) bad(field string, index int, format string, args ...any) {
	*errs = append(*errs, FieldError{Field: field, Index: index, Msg: fmt.Sprintf(format, args...)})
}

func (errs *fieldErrors) badKey(field, key string, format string, args ...any) {
	*errs = append(*errs, FieldError{Field: field, Index: -1, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// checkSchedules checks each schedule and the daylight-saving policy. It
// reports whether there is at least one schedule and all parse, as the
// jitter check needs fire times to compare with.
func (s *Spec) checkSchedules(errs *fieldErrors) (schedOK bool) {
	schedOK = len(s.Schedules) > 0
	for i, e := range s.Schedules {
		if _, _, err := ParseExpr(e); err != nil {
			errs.bad("schedules", i, "%q: %v", e, err)
			schedOK = false
		}
	}
	if s.DST.Spring != "" && s.DST.Spring != SpringShift && s.DST.Spring != SpringSkip {
		errs.bad("dst.spring", -1, "%q: want shift or skip", s.DST.Spring)
	}
	if s.DST.Fall != "" && s.DST.Fall != FallOnce && s.DST.Fall != FallTwice {
		errs.bad("dst.fall", -1, "%q: want once or twice", s.DST.Fall)
	}
	return schedOK
}

// checkAction checks what the job runs: exactly one of an HTTP request, an
// argv list or a shell script. An HTTP request's templates are checked in
// loc, or in UTC when the zone is wrong, so that a bad zone does not hide
// their own problems.
func (s *Spec) checkAction(errs *fieldErrors, loc *time.Location, zerr error) {
	switch {
	case s.HTTP != nil:
		hloc := loc
		if zerr != nil || hloc == nil {
			hloc = time.UTC
		}
		*errs = append(*errs, s.checkHTTP(hloc)...)
	case len(s.Command) == 0 && s.Shell == "":
		errs.bad("command", -1, "required: an argv list, shell: with a script for /bin/sh -c, or http: with a request")
	case len(s.Command) > 0 && s.Shell != "":
		errs.bad("shell", -1, "give command or shell, not both")
	}
	for i, a := range s.Command {
		switch {
		case i == 0 && strings.TrimSpace(a) == "":
			errs.bad("command", i, "the program is empty")
		case strings.ContainsRune(a, 0):
			errs.bad("command", i, "contains a NUL byte")
		}
	}
	if strings.ContainsRune(s.Shell, 0) {
		errs.bad("shell", -1, "contains a NUL byte")
	}
}

// checkEnvironment checks the variables and the directory the command is
// given. Variables go in name order, so that the messages do not change
// from one run to the next with the map's order.
func (s *Spec) checkEnvironment(errs *fieldErrors) {
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		switch {
		case !envKeyRE.MatchString(k):
			errs.badKey("env", k, "%q is not a variable name (letters, digits, '_', not starting with a digit)", k)
		case strings.HasPrefix(k, FenceEnvPrefix):
			errs.badKey("env", k, "%q: names starting with %s are reserved for the fence environment", k, FenceEnvPrefix)
		case strings.ContainsRune(s.Env[k], 0):
			errs.badKey("env", k, "%q: value contains a NUL byte", k)
		}
	}
	if s.Dir != "" && !filepath.IsAbs(s.Dir) {
		errs.bad("dir", -1, "%q: want an absolute path", s.Dir)
	}
}

// checkLimits checks the durations, counts and sizes that bound a run. An
// output larger than the store takes is refused here rather than after
// the run, when it could only be lost.
func (s *Spec) checkLimits(errs *fieldErrors, l Limits) {
	nonNegative := func(field string, d Duration) {
		if d < 0 {
			errs.bad(field, -1, "%s: must not be negative", d)
		}
	}
	nonNegative("timeout", s.Timeout)
	nonNegative("backoff", s.Backoff)
	nonNegative("catchup_window", s.CatchupWindow)
	nonNegative("jitter", s.Jitter)
	if s.LeaseTTL < 0 || (s.LeaseTTL > 0 && s.LeaseTTL.D() < MinLeaseTTL) {
		errs.bad("lease_ttl", -1, "%s: want at least %s", s.LeaseTTL, MinLeaseTTL)
	}
	if s.Retries < 0 || s.Retries > MaxRetries {
		errs.bad("retries", -1, "%d: want 0 to %d", s.Retries, MaxRetries)
	}
	switch {
	case s.MaxOutputBytes < 0:
		errs.bad("max_output_bytes", -1, "%d: must not be negative", s.MaxOutputBytes)
	case l.MaxBodyBytes <= 0:
	case s.MaxOutputBytes > l.MaxBodyBytes:
		errs.bad("max_output_bytes", -1, "%d is more than store.max_body_bytes (%d): a larger output could never be published; want at most %d",
			s.MaxOutputBytes, l.MaxBodyBytes, l.MaxBodyBytes)
	case s.MaxOutputBytes == 0 && DefaultMaxOutputBytes > l.MaxBodyBytes:
		errs.bad("max_output_bytes", -1, "the default, %d, is more than store.max_body_bytes (%d): set max_output_bytes to at most %d",
			DefaultMaxOutputBytes, l.MaxBodyBytes, l.MaxBodyBytes)
	}
}

// checkPolicies checks how runs are handled (overlap, misfire), kept
// (history) and placed (target). An empty overlap or misfire is valid:
// Normalize picks the default.
func (s *Spec) checkPolicies(errs *fieldErrors) {
	switch s.Overlap {
	case "", OverlapForbid, OverlapAllow, OverlapReplace:
	default:
		errs.bad("overlap", -1, "%q: want forbid, allow or replace", s.Overlap)
	}
	switch s.Misfire {
	case "", MisfireSkip, MisfireLatest, MisfireAll:
	default:
		errs.bad("misfire", -1, "%q: want skip, latest or all", s.Misfire)
	}
	for _, e := range s.History.Check(true) {
		e.Field = "history." + e.Field
		*errs = append(*errs, e)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Target)) {
		if k == "" {
			errs.badKey("target", k, "empty tag name")
		}
	}
}

// checkOutput parses the output key template, renders it for a sample
// scheduled time in loc, and checks the key.
func (s *Spec) checkOutput(loc *time.Location) error {
	sample := time.Date(2026, time.December, 31, 23, 59, 58, 0, loc)
	key, err := s.renderOutput(sample, loc)
	if err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("%q renders an empty key", s.Output)
	}
	if err := fencedstore.CheckKey(key); err != nil {
		return fmt.Errorf("renders %q, not a valid store key: %v", clip(key, 60), err)
	}
	if ns := fencedstore.KeyNamespace(key); ns != s.NamespaceName() {
		return fmt.Errorf("renders %q, a key of namespace %q: keys under %s belong to namespaces, and a job writes only its own namespace's", clip(key, 60), clip(ns, 40), fencedstore.NamespaceKeyRoot)
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// minGap returns the shortest interval between the schedule's fire times
// over a sample of them (zero if it fires fewer than twice).
func minGap(s *Schedule) time.Duration {
	var gap time.Duration
	ts := s.NextN(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 50)
	for i := 1; i < len(ts); i++ {
		if d := ts[i].Sub(ts[i-1]); gap == 0 || d < gap {
			gap = d
		}
	}
	return gap
}
