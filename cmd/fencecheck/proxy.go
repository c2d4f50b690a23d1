package main

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Proxy modes.
const (
	// ProxyPass forwards both ways.
	ProxyPass = "pass"
	// ProxyDown refuses new connections and cuts open ones: the far side
	// is unreachable, and a call in flight has an unknown outcome.
	ProxyDown = "down"
	// ProxyHold accepts connections but holds every request chunk until
	// Release, which lets them through one connection at a time in a
	// random order: messages delayed, then delivered out of order.
	ProxyHold = "hold"
)

// Proxy forwards TCP connections to Target and injects faults into them.
// It carries the workers' store traffic, so the nemesis can delay,
// reorder and cut store calls without touching anything else. Replies
// (target to client) are never held: what was delivered is answered.
type Proxy struct {
	Target string

	ln    net.Listener
	mu    sync.Mutex
	mode  string
	conns map[net.Conn]bool
	held  []chan struct{}
	// Held counts the chunks ever held, Cut the connections cut.
	Held, Cut int
	wg        sync.WaitGroup
	done      chan struct{}
}

// Listen starts a proxy on addr ("host:0" picks a port) in pass mode.
func Listen(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{Target: target, ln: ln, mode: ProxyPass, conns: map[net.Conn]bool{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Mode returns the current mode.
func (p *Proxy) Mode() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetMode switches to ProxyPass, ProxyDown or ProxyHold. Leaving hold
// releases the held chunks in their arrival order; use Release to
// shuffle them.
func (p *Proxy) SetMode(mode string) {
	p.mu.Lock()
	if p.mode == ProxyHold && mode != ProxyHold {
		deliverAll(p.held)
		p.held = nil
	}
	p.mode = mode
	var cut []net.Conn
	if mode == ProxyDown {
		for c := range p.conns {
			cut = append(cut, c)
		}
		p.Cut += len(cut)
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
}

// Release ends hold: the held chunks go through one by one in an order
// drawn from rng, each up to gap after the previous, and new traffic
// passes at once. It returns how many were held.
func (p *Proxy) Release(rng *rand.Rand, gap time.Duration) int {
	p.mu.Lock()
	held := p.held
	p.held = nil
	p.mode = ProxyPass
	p.mu.Unlock()
	return deliverShuffled(held, rng, gap, p.done)
}

func (p *Proxy) cutCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Cut
}

// Close stops the proxy and cuts every connection.
func (p *Proxy) Close() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	close(p.done)
	err := p.ln.Close()
	p.SetMode(ProxyDown)
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.Mode() == ProxyDown {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on && p.mode == ProxyDown {
		return false
	}
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	target, err := net.DialTimeout("tcp", p.Target, 2*time.Second)
	if err != nil {
		return
	}
	defer target.Close()
	if !p.track(client, true) {
		return
	}
	defer p.track(client, false)
	p.track(target, true)
	defer p.track(target, false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(client, target)
		client.Close()
	}()
	if p.forward(client, target) {
		// The client finished sending: let the reply come back.
		if tc, ok := target.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	} else {
		target.Close()
	}
	<-done
}

// forward copies client to target through the gate; it reports whether
// the client ended cleanly.
func (p *Proxy) forward(client, target net.Conn) bool {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if !p.gate() {
				return false
			}
			if _, werr := target.Write(buf[:n]); werr != nil {
				return false
			}
		}
		if err != nil {
			return errors.Is(err, io.EOF)
		}
	}
}

// gate waits while the proxy holds traffic; it reports false when the
// connection must be dropped instead.
func (p *Proxy) gate() bool {
	p.mu.Lock()
	switch p.mode {
	case ProxyDown:
		p.mu.Unlock()
		return false
	case ProxyPass:
		p.mu.Unlock()
		return true
	}
	ch := make(chan struct{})
	p.held = append(p.held, ch)
	p.Held++
	p.mu.Unlock()
	select {
	case <-ch:
		return p.Mode() != ProxyDown
	case <-p.done:
		return false
	}
}
