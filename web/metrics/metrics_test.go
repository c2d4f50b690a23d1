package metrics

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/scheduler/buildinfo"
)

// answerStore answers every write with the next of its answers.
type answerStore struct {
	fencedstore.Store
	answers []answer
}

type answer struct {
	res fencedstore.Result
	err error
}

func (s *answerStore) next() (fencedstore.Result, error) {
	a := s.answers[0]
	s.answers = s.answers[1:]
	return a.res, a.err
}

func (s *answerStore) Establish(context.Context, fencedstore.EstablishRequest) (fencedstore.Result, error) {
	return s.next()
}

func (s *answerStore) Publish(context.Context, fencedstore.PublishRequest) (fencedstore.Result, error) {
	return s.next()
}

func decided(o fencedstore.Outcome, err error) answer {
	if err != nil {
		err = fmt.Errorf("reports/a.csv: %w", err)
	}
	return answer{fencedstore.Result{Outcome: o, Key: "reports/a.csv"}, err}
}

// A store wrapped by CountDecisions counts each decision once by outcome,
// refusals included, and nothing for calls the store did not decide.
func TestNode_CountDecisions(t *testing.T) {
	n := New()
	s := n.CountDecisions(&answerStore{answers: []answer{
		decided(fencedstore.Established, nil),
		decided(fencedstore.Applied, nil),
		decided(fencedstore.Applied, nil),
		decided(fencedstore.StaleOwner, fencedstore.ErrStaleOwner),
		decided(fencedstore.Conflict, fencedstore.ErrConflict),
		decided(fencedstore.Expired, fencedstore.ErrExpired),
		{err: fencedstore.ErrUnavailable},
		{err: fencedstore.ErrInvalidKey},
	}})
	ctx := context.Background()
	s.Establish(ctx, fencedstore.EstablishRequest{})
	for range 7 {
		s.Publish(ctx, fencedstore.PublishRequest{})
	}
	want := []OutcomeCount{{fencedstore.Applied, 2}, {fencedstore.Established, 1}, {fencedstore.StaleOwner, 1}, {fencedstore.Conflict, 1}, {fencedstore.Expired, 1}}
	if got := n.StoreDecisions(); !slices.Equal(got, want) {
		t.Errorf("StoreDecisions() = %v, want %v", got, want)
	}
	if got := testutil.CollectAndCount(decisionCollector{n}); got != 5 {
		t.Errorf("%d fencecron_store_decisions_total samples, want 5", got)
	}
}

// Two nodes in one process keep separate figures: no global registry.
func TestNew_OwnRegistry(t *testing.T) {
	a, b := New(), New()
	a.LeaseTransition("suspect")
	if got := testutil.ToFloat64(b.transitions.WithLabelValues("suspect")); got != 0 {
		t.Errorf("b counted a's transition: %v", got)
	}
	if got := testutil.ToFloat64(a.transitions.WithLabelValues("suspect")); got != 1 {
		t.Errorf("a's transitions = %v, want 1", got)
	}
	if _, err := a.Registry().Gather(); err != nil {
		t.Errorf("Gather: %v", err)
	}
}

// /metrics names the build as `fencecron version` does, value 1, with the
// four labels the contract lists.
func TestNew_BuildInfo(t *testing.T) {
	bi := buildinfo.Get()
	want := fmt.Sprintf(`
# HELP fencecron_build_info Always 1; the labels name this node's build: version, commit, the replicated log's format it reads and writes (log_version), Go version.
# TYPE fencecron_build_info gauge
fencecron_build_info{commit=%q,goversion=%q,log_version="%d",version=%q} 1
`, bi.Commit, bi.GoVersion, bi.LogVersion, bi.Version)
	if err := testutil.GatherAndCompare(New().Registry(), strings.NewReader(want), "fencecron_build_info"); err != nil {
		t.Error(err)
	}
}
