package netlimit

import (
	"errors"
	"net"
	"testing"
	"time"
)

// The total cap: with total connections open, the next waits to be
// accepted until one closes; closing the listener ends a waiting Accept.
func TestListener_Total(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Listener(raw, 2, 1)
	accepted := make(chan net.Conn, 3)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	var conns []net.Conn
	for range 2 {
		select {
		case c := <-accepted:
			conns = append(conns, c)
		case <-time.After(5 * time.Second):
			t.Fatal("the first two connections were not accepted (loopback is not capped per client)")
		}
	}
	// The third is not accepted while two are open (a bounded look).
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted with the cap at 2")
	case <-time.After(100 * time.Millisecond):
	}
	conns[0].Close()
	conns[0].Close() // a second Close frees nothing more
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the third connection was not accepted after one closed")
	}
	if l := ln.(*listener); len(l.slots) != 2 {
		t.Errorf("%d slots taken, want 2", len(l.slots))
	}
	// Both slots are taken, so Accept waits for one; Close ends it.
	ln.Close()
	select {
	case err := <-acceptErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the waiting Accept")
	}
}

// fakeListener hands out in-memory connections from given addresses.
type fakeListener struct {
	addrs chan net.Addr
}

func (f *fakeListener) Accept() (net.Conn, error) {
	a, ok := <-f.addrs
	if !ok {
		return nil, net.ErrClosed
	}
	c, _ := net.Pipe()
	return addrConn{Conn: c, remote: a}, nil
}
func (f *fakeListener) Close() error   { return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// One client may hold perClient connections: more are closed without
// waiting, and other clients (an IPv6 /64 counting as one) still get in.
func TestListener_PerClient(t *testing.T) {
	f := &fakeListener{addrs: make(chan net.Addr, 16)}
	ln := Listener(f, 100, 2)
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }
	for _, a := range []string{"192.0.2.7", "192.0.2.7", "192.0.2.7", "192.0.2.7", "198.51.100.1",
		"2001:db8::1", "2001:db8::2", "2001:db8::3", "2001:db8:1::1", "127.0.0.1", "127.0.0.1", "127.0.0.1"} {
		f.addrs <- tcp(a)
	}
	close(f.addrs)
	var got []string
	var first net.Conn
	for {
		c, err := ln.Accept()
		if err != nil {
			break
		}
		if first == nil {
			first = c
		}
		got = append(got, c.RemoteAddr().String())
	}
	want := []string{"192.0.2.7:40000", "192.0.2.7:40000", "198.51.100.1:40000", "[2001:db8::1]:40000", "[2001:db8::2]:40000",
		"[2001:db8:1::1]:40000", "127.0.0.1:40000", "127.0.0.1:40000", "127.0.0.1:40000"}
	if len(got) != len(want) {
		t.Fatalf("accepted %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("accepted %v, want %v", got, want)
		}
	}
	// A closed connection gives its client's place back.
	first.Close()
	if key, ok := ln.(*listener).admit(tcp("192.0.2.7")); !ok || key != "192.0.2.7" {
		t.Errorf("after a close, the client is refused: %q %v", key, ok)
	}
}
