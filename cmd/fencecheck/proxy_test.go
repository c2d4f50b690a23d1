package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/fencemodel"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintln(c, sc.Text())
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func call(addr, line string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestProxy_Modes(t *testing.T) {
	p, err := Listen("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	if got, err := call(p.Addr(), "hello"); err != nil || got != "hello\n" {
		t.Fatalf("pass: %q, %v", got, err)
	}

	p.SetMode(ProxyDown)
	if got, err := call(p.Addr(), "x"); err == nil {
		t.Fatalf("down: answered %q", got)
	}
	p.SetMode(ProxyPass)

	// Held calls wait, then arrive in an order drawn from the seed.
	p.SetMode(ProxyHold)
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			got, err := call(p.Addr(), fmt.Sprint(i))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("held call %d: %v", i, err)
			}
			order = append(order, got)
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.heldNow() < 6 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	if len(order) != 0 {
		t.Errorf("answers %v while held", order)
	}
	mu.Unlock()
	if got := p.Release(rand.New(rand.NewPCG(1, 2)), 20*time.Millisecond); got != 6 {
		t.Errorf("released %d, want 6", got)
	}
	wg.Wait()
	sorted := slices.Clone(order)
	slices.Sort(sorted)
	if len(order) != 6 || slices.Equal(sorted, order) && slices.Equal(order, []string{"0\n", "1\n", "2\n", "3\n", "4\n", "5\n"}) {
		t.Logf("order %q (may be sorted by chance)", order)
	}
	if got, err := call(p.Addr(), "after"); err != nil || got != "after\n" {
		t.Fatalf("after release: %q, %v", got, err)
	}
}

func (p *Proxy) heldNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// The store proxy records each write with the answer the client got,
// holds calls and lets them go in a random order, and cuts calls when the
// link is down (recording nothing for a call that never reached the
// store).
func TestStoreProxy_RecordsHoldsAndCuts(t *testing.T) {
	signer, err := fencedstore.NewSigner([]byte("store-proxy-cluster-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&httpstore.Handler{Store: newPlantedStore(false), Signer: signer, Logger: slog.New(slog.DiscardHandler)})
	defer srv.Close()
	p, err := ListenStoreProxy("127.0.0.1:0", srv.URL, signer, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := httpstore.NewClient(p.Addr(), signer)
	ctx := context.Background()
	tok := func(seq uint64) fencedstore.Token { return fencedstore.Token{Epoch: 2, Seq: seq} }

	if _, err := c.Establish(ctx, fencedstore.EstablishRequest{Key: "k", Token: tok(5), Attempt: "a5"}); err != nil {
		t.Fatal(err)
	}
	p.SetMode(ProxyHold)
	var wg sync.WaitGroup
	for _, seq := range []uint64{7, 6} {
		wg.Go(func() {
			c.Publish(ctx, fencedstore.PublishRequest{Key: "k", Token: tok(seq), Attempt: fmt.Sprintf("a%d", seq), Body: []byte("x")})
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.heldCalls() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := len(p.Operations()); got != 1 {
		t.Fatalf("%d calls recorded while two are held, want 1", got)
	}
	if n := p.Release(rand.New(rand.NewPCG(3, 4)), 10*time.Millisecond); n != 2 {
		t.Fatalf("released %d, want 2", n)
	}
	wg.Wait()

	p.SetMode(ProxyDown)
	if _, err := c.Establish(ctx, fencedstore.EstablishRequest{Key: "k", Token: tok(9), Attempt: "a9"}); !errors.Is(err, fencedstore.ErrUnavailable) {
		t.Fatalf("establish with the link down: %v, want unavailable", err)
	}
	p.SetMode(ProxyPass)

	ops := p.Operations()
	if len(ops) != 3 {
		t.Fatalf("%d calls recorded, want 3: %v", len(ops), ops)
	}
	outcomes := map[string]fencedstore.Outcome{}
	for _, op := range ops {
		in, out := op.Input.(fencemodel.Input), op.Output.(fencemodel.Output)
		if out.Unknown || op.Return <= op.Call {
			t.Errorf("call %+v: %+v, window %d..%d", in, out, op.Call, op.Return)
		}
		outcomes[in.Attempt] = out.Outcome
	}
	// Whichever of 6 and 7 went first, 7 is applied; 6 is applied only
	// if it went first.
	if outcomes["a5"] != fencedstore.Established || outcomes["a7"] != fencedstore.Applied {
		t.Errorf("outcomes %v", outcomes)
	}
	if res, _ := fencemodel.Check(ops, time.Second); res != porcupine.Ok {
		t.Errorf("an honest store's answers: porcupine says %v", res)
	}
}

func (p *StoreProxy) heldCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}
