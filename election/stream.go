package election

import (
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
	conns   map[*serverConn]bool // accepted and not closed; closed by Close
	closed  bool
}

func newTLSStream(ln net.Listener, advertise net.Addr, id *clustertls.Identity, peerName func(string) string, log *slog.Logger) *tlsStream {
	return &tlsStream{
		ln: netlimit.Listener(ln, raftMaxConns, raftMaxConnsPerHost), advertise: advertise, id: id, peerName: peerName, log: log,
		server:  id.RaftServerConfig(),
		refused: map[string]time.Time{},
		conns:   map[*serverConn]bool{},
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	s.conns[sc] = true
	return sc, nil
}

// Close stops accepting and closes every accepted connection, so raft's
// handlers of them end too.
func (s *tlsStream) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
	return err
}

func (s *tlsStream) Addr() net.Addr { return s.advertise }

// Dial connects to another server's Raft port, verifying it is a node of
// the cluster (and, when known, the node expected at that address).
func (s *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	cfg := s.id.RaftClientConfig(s.peerName(string(address)))
	d := &net.Dialer{Timeout: timeout}
	return tls.DialWithDialer(d, "tcp", string(address), cfg)
}

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

func (c *serverConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}
