package web

import (
	"net"
	"sync"
)

// limitListener returns a listener that has at most max of ln's
// connections open at once: Accept waits until one of them closes. The
// waiting connections stay in the kernel's listen queue, so a flood of
// clients, or of connections that never finish a request (which the
// server's read timeouts close in time), cannot use up the process's
// file descriptors, which its jobs need too. max <= 0 means no cap.
//
// Closing the listener ends a waiting Accept.
func limitListener(ln net.Listener, max int) net.Listener {
	if max <= 0 {
		return ln
	}
	return &limitedListener{Listener: ln, slots: make(chan struct{}, max), done: make(chan struct{})}
}

type limitedListener struct {
	net.Listener
	slots     chan struct{} // one token per open connection
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitedListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitedListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitedConn gives its slot back once, on the first Close.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
