package election

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// ErrLogStoreHung is returned for a log write that did not finish in time.
var ErrLogStoreHung = errors.New("raft log store write hung")

// timeoutLogStore fails log writes that do not finish in time. A leader
// whose log write fails steps down, so a leader on a hung disk stops
// leading instead of heart-beating forever (hashicorp/raft#503). While one
// write is still stuck, later writes fail at once rather than pile up.
type timeoutLogStore struct {
	raft.LogStore
	timeout time.Duration
	log     *slog.Logger
	stuck   atomic.Bool
}

func newTimeoutLogStore(s raft.LogStore, timeout time.Duration, log *slog.Logger) *timeoutLogStore {
	return &timeoutLogStore{LogStore: s, timeout: timeout, log: log}
}

func (s *timeoutLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *timeoutLogStore) StoreLogs(logs []*raft.Log) error {
	if s.stuck.Load() {
		return fmt.Errorf("%w: an earlier write has not finished", ErrLogStoreHung)
	}
	done := make(chan error, 1)
	go func() { done <- s.LogStore.StoreLogs(logs) }()
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		s.stuck.Store(true)
		s.log.Error("raft log write hung; failing it so this node steps down", "timeout", s.timeout)
		go func() {
			<-done
			s.stuck.Store(false)
			s.log.Warn("hung raft log write finished")
		}()
		return fmt.Errorf("%w after %s", ErrLogStoreHung, s.timeout)
	}
}
