package executor

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"
)

// Bounds of the connections opened ahead of a run.
const (
	// maxSpares is how many connections a target keeps opened ahead: as
	// many cold runs to one target at one instant find one.
	maxSpares = 4
	// spareMaxAge is how long a connection opened ahead is offered: a run
	// opens it within PreGrantLead (half a second) of its send, and an
	// older one is a leftover that a server may have dropped.
	spareMaxAge = 5 * time.Second
)

// target is one target's shared transport, and the connections opened
// for it ahead of runs that would otherwise dial at their fire time.
type target struct {
	tr *http.Transport
	// addr is the host:port the target is dialed at; direct is whether
	// its requests go there, not through a proxy (only then is anything
	// opened ahead).
	addr   string
	direct bool

	mu       sync.Mutex
	lastSent time.Time // when a request last went through tr
	spares   []spare
}

// spare is a connection opened ahead, and when.
type spare struct {
	conn net.Conn
	at   time.Time
}

// dial is tr's DialContext: a fresh connection opened ahead for the
// target if there is one, else a new one.
func (t *target) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if addr == t.addr {
		for {
			c := t.takeSpare()
			if c == nil {
				break
			}
			if alive(c) {
				return c, nil
			}
			c.Close()
		}
	}
	return dialer.DialContext(ctx, network, addr)
}

// takeSpare returns the newest connection opened ahead, closing those
// too old to offer; nil if none is left.
func (t *target) takeSpare() net.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.spares) > 0 {
		s := t.spares[len(t.spares)-1]
		t.spares = t.spares[:len(t.spares)-1]
		if time.Since(s.at) <= spareMaxAge {
			return s.conn
		}
		s.conn.Close()
	}
	return nil
}

// alive reports whether a connection opened ahead is still open and
// silent: a server that closed it, or spoke first, is not one to send on.
// It peeks without waiting (a read deadline in the past makes Go return
// before it reads at all), one system call at the send.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var (
		n    int
		perr error
		b    [1]byte
	)
	err = rc.Read(func(fd uintptr) bool {
		n, _, perr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait: an answer now or none
	})
	return err == nil && n <= 0 && errors.Is(perr, syscall.EAGAIN)
}

// sent records that a request went through the target's transport, whose
// connection it leaves idle for the next.
func (t *target) sent() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.lastSent = time.Now()
	t.mu.Unlock()
}

// warm opens a connection to the target ahead of a run, unless the
// transport likely holds an idle one (a request went through it within
// the idle timeout), enough are open ahead already, or a proxy stands
// between. It waits for the dial at most until ctx ends; a dial that
// fails leaves the run to dial at its send, as without.
func (t *target) warm(ctx context.Context) {
	if t == nil || !t.direct {
		return
	}
	t.mu.Lock()
	cold := time.Since(t.lastSent) > idleConnTimeout && len(t.spares) < maxSpares
	t.mu.Unlock()
	if !cold {
		return
	}
	c, err := dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.spares) >= maxSpares {
		c.Close()
		return
	}
	t.spares = append(t.spares, spare{conn: c, at: time.Now()})
}

// close closes the target's idle connections and those opened ahead.
func (t *target) close() {
	t.tr.CloseIdleConnections()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.spares {
		s.conn.Close()
	}
	t.spares = nil
}

// Warm opens a connection to the request's target ahead of the send if
// none is likely open (its target sent nothing within the idle timeout),
// waiting at most until ctx ends: a job that fires hourly finds its
// connection open, as one firing every second does. Only the TCP
// connection is opened ahead; an https target's handshake is made at the
// send. Nothing happens for a request that keeps nothing, or that goes
// through a proxy.
func (r *PreparedHTTP) Warm(ctx context.Context) {
	if r.hreq == nil {
		return
	}
	r.target.warm(ctx)
}

// canonicalAddr is u's host:port, with the scheme's port if it names
// none, as the transport dials it.
func canonicalAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port)
}
