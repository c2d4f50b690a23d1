package feed

import (
	"slices"
	"testing"
)

// A feed whose reader lags loses nothing silently: past its bound it
// says resync, once, and then delivers again.
func TestHub_OverflowSaysResync(t *testing.T) {
	h := NewHub(3, -1)
	f := h.Subscribe()
	defer f.Close()
	h.Publish([]int{1, 2})
	h.Publish([]int{3})
	if got := f.Take(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("took %v, want [1 2 3]", got)
	}
	h.Publish([]int{1, 2})
	h.Publish([]int{3, 4})
	h.Publish([]int{5})
	if got := f.Take(); !slices.Equal(got, []int{-1}) {
		t.Errorf("after an overflow: %v, want the resync item alone", got)
	}
	if got := f.Take(); len(got) != 0 {
		t.Errorf("after the resync: %v, want nothing", got)
	}
	h.Publish([]int{6})
	select {
	case <-f.Ready():
	default:
		t.Fatal("Ready not signalled after a publish")
	}
	if got := f.Take(); !slices.Equal(got, []int{6}) {
		t.Errorf("took %v, want [6]", got)
	}
}

// A closed feed gets nothing more, and the others still do.
func TestHub_Close(t *testing.T) {
	h := NewHub(10, 0)
	a, b := h.Subscribe(), h.Subscribe()
	a.Close()
	h.Publish([]int{7})
	if got := a.Take(); len(got) != 0 {
		t.Errorf("closed feed took %v", got)
	}
	if got := b.Take(); !slices.Equal(got, []int{7}) {
		t.Errorf("open feed took %v, want [7]", got)
	}
	b.Close()
}

// Signals coalesce: many signals before a read are one wake-up, and an
// ended subscription is not signalled.
func TestSignals_Coalesce(t *testing.T) {
	var s Signals
	ch, stop := s.Subscribe()
	_, stop2 := s.Subscribe()
	stop2()
	if n := s.Len(); n != 1 {
		t.Fatalf("%d subscriptions, want 1", n)
	}
	s.Signal()
	s.Signal()
	<-ch
	select {
	case <-ch:
		t.Error("two signals woke the subscriber twice")
	default:
	}
	stop()
	s.Signal()
	select {
	case <-ch:
		t.Error("an ended subscription was signalled")
	default:
	}
}
