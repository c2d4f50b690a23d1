// Package fencemodel checks histories of fenced-store calls: a porcupine
// model of one fenced register per key, a recorder that turns concurrent
// calls on any fencedstore.Store into a porcupine history, and direct
// checkers for the fencing invariant and for a key's recorded history.
//
// The model's step is fencedstore.DecideEstablish and DecidePublish, the one
// statement of the rules, so a linearizable history is one some sequential
// order of the rules table explains. The store tests and the end-to-end fault
// harness both use it.
package fencemodel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencecron/fencecron/fencedstore"
)

// Kind is the kind of call.
type Kind int

// Kinds of call.
const (
	Establish Kind = iota
	Publish
	Get
	// Delete is retention deleting the key: its tombstone keeps the
	// greatest token.
	Delete
)

func (k Kind) String() string {
	switch k {
	case Establish:
		return "establish"
	case Publish:
		return "publish"
	case Get:
		return "get"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// NoVersion marks a publish without an expected version.
const NoVersion = -1

// Input is one call as the model sees it. It is a comparable value.
type Input struct {
	Kind    Kind
	Key     string
	Token   fencedstore.Token
	Attempt string
	Hash    string // publish: hash of the body
	// Expected is the publish's expected version, or NoVersion.
	Expected int64
	// Expires is the call's expiry, zero for none.
	Expires time.Time
}

// Output is what the store answered.
type Output struct {
	// Unknown marks a call that failed without a decision (an error other
	// than stale_owner or conflict, a timeout): it may or may not have
	// taken effect. Its Return in the history is +inf.
	Unknown bool
	// Establish and Publish: the Result.
	Outcome  fencedstore.Outcome
	Version  uint64
	Greatest fencedstore.Token
	// Get: whether the key has a body, and its state.
	Found bool
	Token fencedstore.Token // token of the write that made the body
	Hash  string
}

// State is one key's register: the fields the rules look at.
type State struct {
	Version  uint64
	Greatest fencedstore.Token
	Token    fencedstore.Token
	Attempt  string
	Hash     string
	// Deleted marks a tombstone: retention deleted the key, and only its
	// greatest token is left.
	Deleted bool
}

// tombstoneTime stands for the deletion time in the Meta the rules see;
// the model has no clock, and the rules only ask whether there is one.
var tombstoneTime = time.Unix(1, 0).UTC()

func (s State) meta() fencedstore.Meta {
	m := fencedstore.Meta{Version: s.Version, Greatest: s.Greatest, Token: s.Token, Attempt: s.Attempt, Hash: s.Hash}
	if s.Deleted {
		m.Deleted = tombstoneTime
	}
	return m
}

func stateOf(m fencedstore.Meta) State {
	return State{Version: m.Version, Greatest: m.Greatest, Token: m.Token, Attempt: m.Attempt, Hash: m.Hash, Deleted: !m.Deleted.IsZero()}
}

// Step applies in to s by the rules table and reports whether out is an
// answer the store may give; it returns the next state.
//
// The model has no clock: a call that carries an expiry may be refused as
// expired (by the store's clock), and that answer is legal when it changed
// nothing; otherwise the call is judged by the rules as if it had none.
func Step(s State, in Input, out Output) (bool, State) {
	if in.Kind != Get && !in.Expires.IsZero() && !out.Unknown && out.Outcome == fencedstore.Expired {
		return out.Version == s.Version && out.Greatest == s.Greatest, s
	}
	switch in.Kind {
	case Establish:
		next, d := fencedstore.DecideEstablish(s.meta(), fencedstore.Token{}, fencedstore.EstablishRequest{Key: in.Key, Token: in.Token, Attempt: in.Attempt}, time.Time{})
		ns := stateOf(next)
		return out.Unknown || (out.Outcome == d.Outcome && out.Version == ns.Version && out.Greatest == ns.Greatest), ns
	case Publish:
		req := fencedstore.PublishRequest{Key: in.Key, Token: in.Token, Attempt: in.Attempt}
		if in.Expected != NoVersion {
			v := uint64(in.Expected)
			req.ExpectedVersion = &v
		}
		next, d := fencedstore.DecidePublish(s.meta(), fencedstore.Token{}, req, in.Hash, time.Time{})
		ns := stateOf(next)
		return out.Unknown || (out.Outcome == d.Outcome && out.Version == ns.Version && out.Greatest == ns.Greatest), ns
	case Delete:
		m, _ := fencedstore.DecideDelete(s.meta(), tombstoneTime)
		return true, stateOf(m)
	case Get:
		if out.Unknown {
			return true, s
		}
		if s.Version == 0 || s.Deleted {
			return !out.Found, s
		}
		return out.Found && out.Version == s.Version && out.Token == s.Token && out.Hash == s.Hash && out.Greatest == s.Greatest, s
	}
	return false, s
}

// Model is the porcupine model: one fenced register per key, partitioned
// by key.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return State{} },
	Step: func(state, input, output any) (bool, any) {
		return Step(state.(State), input.(Input), output.(Output))
	},
	Equal: func(a, b any) bool { return a.(State) == b.(State) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		var b strings.Builder
		fmt.Fprintf(&b, "%s(%s", in.Kind, in.Key)
		if in.Kind != Get {
			fmt.Fprintf(&b, ", %s, %s", in.Token, in.Attempt)
		}
		if in.Kind == Publish {
			fmt.Fprintf(&b, ", body %.8s", in.Hash)
			if in.Expected != NoVersion {
				fmt.Fprintf(&b, ", if v%d", in.Expected)
			}
		}
		if !in.Expires.IsZero() {
			fmt.Fprintf(&b, ", expires %s", in.Expires.UTC().Format(time.RFC3339))
		}
		b.WriteString(") -> ")
		switch {
		case out.Unknown:
			b.WriteString("unknown")
		case in.Kind == Get && !out.Found:
			b.WriteString("not found")
		case in.Kind == Get:
			fmt.Fprintf(&b, "v%d by %s body %.8s", out.Version, out.Token, out.Hash)
		default:
			fmt.Fprintf(&b, "%s v%d greatest %s", out.Outcome, out.Version, out.Greatest)
		}
		return b.String()
	},
	DescribeState: func(state any) string {
		s := state.(State)
		return fmt.Sprintf("v%d greatest %s body %.8s by %s/%s", s.Version, s.Greatest, s.Hash, s.Token, s.Attempt)
	},
}

// Check runs porcupine over history with the model. A history that cannot
// be checked within timeout is reported as porcupine.Unknown.
func Check(history []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(Model, history, timeout)
}

// Recorder calls a store and records each call as a porcupine operation.
// Timestamps come from one counter, so they order calls and returns as
// they happened. It is safe for concurrent use.
type Recorder struct {
	clock atomic.Int64
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// Operations returns the recorded history so far.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

func (r *Recorder) record(client int, in Input, call int64, out Output) {
	ret := r.clock.Add(1)
	if out.Unknown {
		ret = math.MaxInt64
	}
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
}

// decided reports whether err is a decision (nil, stale_owner, conflict,
// expired) rather than a failure with an unknown outcome.
func decided(err error) bool {
	return err == nil || fencedstore.IsDecision(err)
}

// Deleter is a store whose keys a test can delete as retention would.
type Deleter interface{ Delete(key string) }

// Delete deletes key from s and records it. A deletion is retention's
// act, not a client's, but recording it lets the model check every call
// around it.
func (r *Recorder) Delete(s Deleter, client int, key string) {
	call := r.clock.Add(1)
	s.Delete(key)
	r.record(client, Input{Kind: Delete, Key: key, Expected: NoVersion}, call, Output{})
}

// Sweep runs one retention step on s and records a deletion of each key
// it deleted, spanning the call: the step is atomic, so each deletion
// took effect at one moment within it.
func (r *Recorder) Sweep(ctx context.Context, s fencedstore.Sweeper, client int, rule fencedstore.RetentionRule, now time.Time, limit int) (fencedstore.Sweep, error) {
	call := r.clock.Add(1)
	sw, err := s.SweepRule(ctx, rule, now, limit)
	for _, k := range append(append([]string{}, sw.ByAge...), sw.ByCount...) {
		r.record(client, Input{Kind: Delete, Key: k, Expected: NoVersion}, call, Output{})
	}
	return sw, err
}

// Establish calls s.Establish and records it.
func (r *Recorder) Establish(ctx context.Context, s fencedstore.Store, client int, req fencedstore.EstablishRequest) (fencedstore.Result, error) {
	in := Input{Kind: Establish, Key: req.Key, Token: req.Token, Attempt: req.Attempt, Expected: NoVersion, Expires: req.Expires}
	call := r.clock.Add(1)
	res, err := s.Establish(ctx, req)
	r.record(client, in, call, Output{Unknown: !decided(err), Outcome: res.Outcome, Version: res.Version, Greatest: res.Greatest})
	return res, err
}

// Publish calls s.Publish and records it.
func (r *Recorder) Publish(ctx context.Context, s fencedstore.Store, client int, req fencedstore.PublishRequest) (fencedstore.Result, error) {
	in := Input{Kind: Publish, Key: req.Key, Token: req.Token, Attempt: req.Attempt, Hash: fencedstore.Hash(req.Body), Expected: NoVersion, Expires: req.Expires}
	if req.ExpectedVersion != nil {
		in.Expected = int64(*req.ExpectedVersion)
	}
	call := r.clock.Add(1)
	res, err := s.Publish(ctx, req)
	r.record(client, in, call, Output{Unknown: !decided(err), Outcome: res.Outcome, Version: res.Version, Greatest: res.Greatest})
	return res, err
}

// Get calls s.Get and records it.
func (r *Recorder) Get(ctx context.Context, s fencedstore.Store, client int, key string) (fencedstore.Object, error) {
	in := Input{Kind: Get, Key: key, Expected: NoVersion}
	call := r.clock.Add(1)
	obj, err := s.Get(ctx, key)
	out := Output{Found: err == nil, Version: obj.Version, Token: obj.Token, Hash: obj.Hash, Greatest: obj.Greatest}
	if err != nil && !errors.Is(err, fencedstore.ErrNotFound) {
		out.Unknown = true
	}
	r.record(client, in, call, out)
	return obj, err
}

// CheckFencing checks the fencing invariant directly on a history, key by
// key, given each key's greatest token at the end (from List):
//
//   - no applied publish carries a token older than one accepted (applied,
//     established, or raised by a conflict) by a call that returned before
//     it was made;
//   - every stale_owner refusal is explained by a newer token some call
//     made before the refusal returned (an expired refusal needs no
//     explanation from other calls, and accepts nothing);
//   - the final greatest token is the largest token the store accepted
//     (or a newer one from a call whose outcome is unknown); a key whose
//     every call has an unknown outcome may be missing at the end.
//
// It returns one error per violation.
func CheckFencing(history []porcupine.Operation, final map[string]fencedstore.Token) []error {
	var errs []error
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		in := op.Input.(Input)
		if in.Kind != Get {
			byKey[in.Key] = append(byKey[in.Key], op)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		ops := byKey[key]
		// Accepted calls (every decision but stale_owner and expired
		// raises the greatest token to at least the call's) by return
		// time, with the running maximum token.
		var acc []porcupine.Operation
		var maxAccepted fencedstore.Token
		for _, op := range ops {
			if out := op.Output.(Output); !out.Unknown && out.Outcome.Accepted() {
				acc = append(acc, op)
				maxAccepted = newer(maxAccepted, op.Input.(Input).Token)
			}
		}
		slices.SortFunc(acc, func(a, b porcupine.Operation) int { return cmp.Compare(a.Return, b.Return) })
		prefixMax := make([]fencedstore.Token, len(acc))
		var m fencedstore.Token
		for i, op := range acc {
			m = newer(m, op.Input.(Input).Token)
			prefixMax[i] = m
		}
		// Calls by call time, for the stale check.
		byCall := slices.Clone(ops)
		slices.SortFunc(byCall, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		for _, op := range ops {
			in, out := op.Input.(Input), op.Output.(Output)
			switch {
			case out.Unknown:
			case out.Outcome == fencedstore.Applied:
				i := sort.Search(len(acc), func(i int) bool { return acc[i].Return >= op.Call })
				if i > 0 && in.Token.Less(prefixMax[i-1]) {
					errs = append(errs, fmt.Errorf("%s: publish with %s by %s applied after %s had been accepted", key, in.Token, in.Attempt, prefixMax[i-1]))
				}
			case out.Outcome == fencedstore.StaleOwner:
				justified := false
				for _, o := range byCall {
					if o.Call > op.Return {
						break
					}
					if in.Token.Less(o.Input.(Input).Token) {
						justified = true
						break
					}
				}
				if !justified {
					errs = append(errs, fmt.Errorf("%s: %s with %s refused as stale, but no newer token was sent before the refusal", key, in.Kind, in.Token))
				}
				if !in.Token.Less(out.Greatest) {
					errs = append(errs, fmt.Errorf("%s: %s with %s refused as stale, but the greatest token it reported is %s", key, in.Kind, in.Token, out.Greatest))
				}
			}
		}
		got, ok := final[key]
		switch {
		case !ok && allUnknown(ops):
			// No call on it is known to have reached the store (all
			// were cut in flight): the key may never have been made.
		case !ok:
			errs = append(errs, fmt.Errorf("%s: not listed at the end", key))
		case got.Less(maxAccepted):
			errs = append(errs, fmt.Errorf("%s: final greatest %s is older than accepted %s", key, got, maxAccepted))
		case maxAccepted.Less(got) && !unknownSent(ops, got):
			errs = append(errs, fmt.Errorf("%s: final greatest %s is newer than every accepted token (%s)", key, got, maxAccepted))
		}
	}
	return errs
}

func unknownSent(ops []porcupine.Operation, tok fencedstore.Token) bool {
	for _, op := range ops {
		if op.Output.(Output).Unknown && op.Input.(Input).Token == tok {
			return true
		}
	}
	return false
}

// allUnknown reports whether no call of ops has a known outcome.
func allUnknown(ops []porcupine.Operation) bool {
	for _, op := range ops {
		if !op.Output.(Output).Unknown {
			return false
		}
	}
	return true
}

// newer returns the greater of two tokens.
func newer(a, b fencedstore.Token) fencedstore.Token {
	if a.Less(b) {
		return b
	}
	return a
}

// CheckHistory replays a key's complete recorded history (every decision
// since the key was created, nothing trimmed) through the rules and
// returns an error at the first decision the rules could not have made
// from the state the earlier ones left, at the decision's recorded time
// and with its recorded expiry. A conflict's expected version is not
// recorded, so a conflict is only checked for what it must do to the
// greatest token.
func CheckHistory(h []fencedstore.Decision) error {
	var s State
	for i, d := range h {
		if d.Outcome == fencedstore.Deleted && i == 0 {
			// Retention deleted the key and everything recorded before:
			// the replay starts from the tombstone.
			s = State{Greatest: d.Greatest}
		}
		if d.Greatest != s.Greatest {
			return fmt.Errorf("decision %d (%s %s): recorded greatest-before %s, replay has %s", i, d.Outcome, d.Token, d.Greatest, s.Greatest)
		}
		var want fencedstore.Decision
		next := s
		late := !d.Expires.IsZero() && d.Expires.Before(d.Time)
		switch d.Outcome {
		case fencedstore.Deleted:
			var m fencedstore.Meta
			m, want = fencedstore.DecideDelete(s.meta(), d.Time)
			want.Time = time.Time{}
			next = stateOf(m)
		case fencedstore.Established:
			var m fencedstore.Meta
			m, want = fencedstore.DecideEstablish(s.meta(), fencedstore.Token{}, fencedstore.EstablishRequest{Token: d.Token, Attempt: d.Attempt, Expires: d.Expires}, d.Time)
			next = stateOf(m)
		case fencedstore.Applied:
			var m fencedstore.Meta
			m, want = fencedstore.DecidePublish(s.meta(), fencedstore.Token{}, fencedstore.PublishRequest{Token: d.Token, Attempt: d.Attempt, Expires: d.Expires}, d.Hash, d.Time)
			next = stateOf(m)
		case fencedstore.Expired:
			want = fencedstore.Decision{Outcome: fencedstore.Expired, Version: s.Version}
			if !late {
				want.Outcome = "not expired"
			}
		case fencedstore.StaleOwner:
			want = fencedstore.Decision{Outcome: fencedstore.StaleOwner, Version: s.Version}
			switch {
			case late:
				want.Outcome = fencedstore.Expired
			case !d.Floor.IsZero():
				// Refused by its job's floor, which the key's
				// state does not hold: the token must be at or
				// below the floor it names.
				if d.Floor.Less(d.Token) {
					want.Outcome = "not at or below its floor"
				}
			case !d.Token.Less(s.Greatest) && !(s.Deleted && d.Token == s.Greatest):
				want.Outcome = "not stale"
			}
		case fencedstore.Conflict:
			want = fencedstore.Decision{Outcome: fencedstore.Conflict, Version: s.Version}
			switch {
			case late:
				want.Outcome = fencedstore.Expired
			case d.Token.Less(s.Greatest) || (s.Deleted && d.Token == s.Greatest):
				want.Outcome = fencedstore.StaleOwner
			case d.Token == s.Greatest && s.Version > 0 && d.Token == s.Token && d.Attempt == s.Attempt && d.Hash == s.Hash:
				want.Outcome = fencedstore.Applied
			}
			next.Greatest = newer(s.Greatest, d.Token)
			if s.Deleted && s.Greatest.Less(d.Token) {
				next = State{Greatest: d.Token} // a newer token brings the key back
			}
		default:
			return fmt.Errorf("decision %d: unknown outcome %q", i, d.Outcome)
		}
		if want.Outcome != d.Outcome || want.Version != d.Version {
			return fmt.Errorf("decision %d (%s by %s): recorded %s v%d, the rules give %s v%d", i, d.Token, d.Attempt, d.Outcome, d.Version, want.Outcome, want.Version)
		}
		s = next
	}
	return nil
}
