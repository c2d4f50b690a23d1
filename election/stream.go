package election

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/election/netlimit"
)

// Limits of the Raft listener. Only nodes of the cluster get past the
// handshake; these bound what a stranger can hold before that, and keep
// one host from taking every slot (see netlimit).
const (
	raftHandshakeTimeout = 5 * time.Second
	raftMaxConns         = 256
	raftMaxConnsPerHost  = 16
	// refusalLogEvery bounds how often a refused peer address is logged.
	refusalLogEvery = time.Minute
)

// tlsStream is raft's network layer over mutually authenticated TLS: a
// connection that cannot prove it belongs to the cluster is closed before
// raft reads a byte of it, so a forged AppendEntries or a heartbeat with a
// huge term is never decoded.
type tlsStream struct {
	ln        net.Listener
	advertise net.Addr
	server    *tls.Config
	id        *clustertls.Identity
	// peerName names the node at a Raft address, if known, so a dial
	// checks it reached that node; "" accepts any node of the cluster.
	peerName func(addr string) string
	log      *slog.Logger

	mu      sync.Mutex
	refused map[string]time.Time // remote IP -> last logged refusal
	// conns are the TCP connections under the TLS ones accepted or
	// dialed and not closed yet; Close closes them. (Closing a TLS
	// connection would first wait to send its alert behind any write
	// blocked on a peer that does not read.)
	conns  map[net.Conn]bool
	closed bool
	// dialing ends, with Close, the dials still connecting or in their
	// handshake (a paused peer's kernel accepts, and nobody answers).
	dialing     context.Context
	stopDialing context.CancelFunc
}

func newTLSStream(ln net.Listener, advertise net.Addr, id *clustertls.Identity, peerName func(string) string, log *slog.Logger) *tlsStream {
	dialing, stopDialing := context.WithCancel(context.Background())
	return &tlsStream{
		dialing: dialing, stopDialing: stopDialing,
		ln: netlimit.Listener(ln, raftMaxConns, raftMaxConnsPerHost), advertise: advertise, id: id, peerName: peerName, log: log,
		server:  id.RaftServerConfig(),
		refused: map[string]time.Time{},
		conns:   map[net.Conn]bool{},
	}
}

// Accept returns the next connection, its handshake still to come: raft
// serves each connection on its own goroutine, where the first read runs
// the handshake, so one slow stranger cannot hold up the others.
func (s *tlsStream) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	sc := &serverConn{Conn: tls.Server(c, s.server), s: s}
	if !s.track(c) {
		return nil, net.ErrClosed
	}
	return sc, nil
}

// track adds the TCP connection c to those Close closes, or closes it and
// reports false if the stream is closed already.
func (s *tlsStream) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = true
	return true
}

// closeTracked closes the TLS connection c and forgets it.
func (s *tlsStream) closeTracked(c *tls.Conn) error {
	s.mu.Lock()
	delete(s.conns, c.NetConn())
	s.mu.Unlock()
	return c.Close()
}

// Close stops accepting and closes every connection, accepted or dialed,
// so raft's handlers of them end, and so does any request this node has
// in flight or is still connecting for: raft waits for its replication and heartbeat goroutines
// before it lets a node stop, and one blocked on a peer that does not
// answer would otherwise hold the stop for the transport's whole timeout.
func (s *tlsStream) Close() error {
	err := s.ln.Close()
	s.stopDialing()
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	return err
}

func (s *tlsStream) Addr() net.Addr { return s.advertise }

// Dial connects to another server's Raft port, verifying it is a node of
// the cluster (and, when known, the node expected at that address).
func (s *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	cfg := s.id.RaftClientConfig(s.peerName(string(address)))
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: cfg}
	nc, err := d.DialContext(s.dialing, "tcp", string(address))
	if err != nil {
		return nil, err
	}
	c := nc.(*tls.Conn)
	if !s.track(c.NetConn()) {
		return nil, net.ErrClosed
	}
	return &clientConn{Conn: c, s: s}, nil
}

// clientConn is a dialed connection the stream's Close closes too.
type clientConn struct {
	*tls.Conn
	s *tlsStream
}

func (c *clientConn) Close() error { return c.s.closeTracked(c.Conn) }

// noteRefusal logs a refused connection, at most once a minute per
// address, so a stranger's probes or another cluster's node that shares a
// port cannot flood the log.
func (s *tlsStream) noteRefusal(addr net.Addr, err error) {
	host, _, _ := net.SplitHostPort(addr.String())
	now := time.Now()
	s.mu.Lock()
	last, seen := s.refused[host]
	if seen && now.Sub(last) < refusalLogEvery {
		s.mu.Unlock()
		return
	}
	if len(s.refused) >= 1024 {
		clear(s.refused)
	}
	s.refused[host] = now
	s.mu.Unlock()
	s.log.Warn("refused a connection to the Raft port: it did not prove it belongs to this cluster (a node that probably has a different cluster.secret, another cluster's node, or a stranger)",
		"remote", addr.String(), "err", err)
}

// serverConn runs the handshake, with a deadline, on its first use.
type serverConn struct {
	*tls.Conn
	s    *tlsStream
	once sync.Once
	err  error
}

func (c *serverConn) handshake() error {
	c.once.Do(func() {
		c.Conn.SetDeadline(time.Now().Add(raftHandshakeTimeout))
		if err := c.Conn.Handshake(); err != nil {
			c.s.noteRefusal(c.RemoteAddr(), err)
			// raft logs a read error as a failure to decode a command;
			// a refused stranger is not that.
			c.err = io.EOF
			return
		}
		c.Conn.SetDeadline(time.Time{})
	})
	return c.err
}

func (c *serverConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *serverConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *serverConn) Close() error { return c.s.closeTracked(c.Conn) }
