// Package netlimit bounds the connections a listener holds open, in all
// and per client, so strangers on the network cannot take a node's file
// descriptors, or every slot of a port the cluster itself needs, before a
// single byte of theirs has been checked. The HTTP port and the Raft port
// both go through it.
package netlimit

import (
	"net"
	"sync"
)

// Listener returns ln with at most total connections open at once (Accept
// waits until one closes: the rest stay in the kernel's listen queue) and
// at most perClient from one client (more are closed at once, so one host
// cannot fill the total and hold up everybody's Accept). A client is an
// IPv4 address, or an IPv6 /64, which one host usually holds whole.
// Loopback clients are this host's own processes (jobs, the CLI, a local
// proxy) and count only toward the total. 0 means no cap.
//
// Closing the listener ends a waiting Accept.
func Listener(ln net.Listener, total, perClient int) net.Listener {
	if total <= 0 && perClient <= 0 {
		return ln
	}
	l := &listener{Listener: ln, perClient: perClient, open: map[string]int{}, done: make(chan struct{})}
	if total > 0 {
		l.slots = make(chan struct{}, total)
	}
	return l
}

type listener struct {
	net.Listener
	slots     chan struct{} // one token per open connection; nil: no total cap
	perClient int
	done      chan struct{}
	closeOnce sync.Once

	mu   sync.Mutex
	open map[string]int // per client, non-loopback only
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		if l.slots != nil {
			select {
			case l.slots <- struct{}{}:
			case <-l.done:
				return nil, net.ErrClosed
			}
		}
		c, err := l.Listener.Accept()
		if err != nil {
			l.release()
			return nil, err
		}
		key, ok := l.admit(c.RemoteAddr())
		if !ok {
			c.Close()
			l.release()
			continue
		}
		return &conn{Conn: c, done: func() { l.forget(key); l.release() }}, nil
	}
}

func (l *listener) release() {
	if l.slots != nil {
		<-l.slots
	}
}

// admit counts a connection of the client at addr, unless it has its share
// open already; key is "" for a client that is not counted.
func (l *listener) admit(addr net.Addr) (key string, ok bool) {
	key = Client(addr)
	if l.perClient <= 0 || key == "" {
		return "", true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key] >= l.perClient {
		return "", false
	}
	l.open[key]++
	return key, true
}

func (l *listener) forget(key string) {
	if key == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// conn gives its slot back once, on the first Close.
type conn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.done)
	return err
}

// Client names the client at addr for the per-client count: its IPv4
// address or its IPv6 /64; "" for loopback or an address that is not IP.
func Client(addr net.Addr) string {
	var ip net.IP
	switch a := addr.(type) {
	case *net.TCPAddr:
		ip = a.IP
	default:
		host, _, err := net.SplitHostPort(addr.String())
		if err != nil {
			return ""
		}
		ip = net.ParseIP(host)
	}
	switch {
	case ip == nil, ip.IsLoopback():
		return ""
	case ip.To4() != nil:
		return ip.To4().String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}
