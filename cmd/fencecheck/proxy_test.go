package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
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
