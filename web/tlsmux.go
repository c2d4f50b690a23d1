package web

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/api"
	"github.com/fencecron/fencecron/web/auth"
)

// One port, three kinds of client. The HTTP port serves, by what a
// connection's first bytes and its TLS handshake say:
//
//   - plain HTTP: browsers and the CLI on a trusted network or loopback
//     (the dashboard of `fencecron dev`); never the internal API, and
//     store writes only from loopback;
//   - TLS offering ALPN fencecron/1: other nodes (with the cluster's
//     client certificate) and job processes (with only the cluster CA),
//     presented the node's cluster certificate;
//   - any other TLS: browsers and clients of the public API, presented
//     api.tls's certificate when it is set, else the cluster certificate.
//
// A TLS record starts with byte 0x16 (handshake); no HTTP method does.

// muxListener hands out connections already sorted into plain and TLS,
// so net/http sees a *tls.Conn for TLS and fills in Request.TLS.
type muxListener struct {
	net.Listener
	log *slog.Logger
	// sniff bounds how long a connection may take to send its first byte
	// before it is dropped.
	sniff time.Duration
	tls   *tls.Config
	conns chan net.Conn
	errc  chan error
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup

	mu      sync.Mutex
	sorting map[net.Conn]bool // still waiting for their first byte
}

// newMuxListener serves cluster TLS, public TLS (nil: the cluster
// certificate for every TLS client) and plain HTTP on ln.
func newMuxListener(ln net.Listener, log *slog.Logger, sniff time.Duration, cluster, public *tls.Config) *muxListener {
	m := &muxListener{
		Listener: ln,
		log:      log,
		sniff:    sniff,
		conns:    make(chan net.Conn),
		sorting:  map[net.Conn]bool{},
		errc:     make(chan error, 1),
		done:     make(chan struct{}),
		tls:      clustertls.PortServerConfig(cluster, public),
	}
	m.wg.Add(1)
	go m.acceptLoop()
	return m
}

func (m *muxListener) acceptLoop() {
	defer m.wg.Done()
	var delay time.Duration
	for {
		c, err := m.Listener.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				// Out of descriptors (EMFILE), say: wait and try again, as
				// net/http does, rather than stop serving for good.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				m.log.Warn("http: accept failed; retrying", "err", err, "in", delay)
				t := time.NewTimer(delay)
				select {
				case <-t.C:
					continue
				case <-m.done:
					t.Stop()
					return
				}
			}
			select {
			case m.errc <- err:
			case <-m.done:
			}
			return
		}
		delay = 0
		// Sorting waits for the client's first byte: never in this loop,
		// where one silent client would hold up every other.
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			sorted, ok := m.sort(c)
			if !ok {
				return
			}
			select {
			case m.conns <- sorted:
			case <-m.done:
				sorted.Close()
			}
		}()
	}
}

func (m *muxListener) sort(c net.Conn) (net.Conn, bool) {
	m.mu.Lock()
	select {
	case <-m.done:
		m.mu.Unlock()
		c.Close()
		return nil, false
	default:
	}
	m.sorting[c] = true
	m.mu.Unlock()
	c.SetReadDeadline(time.Now().Add(m.sniff))
	var first [1]byte
	_, err := c.Read(first[:])
	m.mu.Lock()
	delete(m.sorting, c)
	m.mu.Unlock()
	if err != nil {
		c.Close()
		return nil, false
	}
	c.SetReadDeadline(time.Time{})
	pc := &prefixConn{Conn: c, prefix: first[:]}
	if first[0] == 0x16 {
		return tls.Server(pc, m.tls), true
	}
	return pc, true
}

// Accept returns the next sorted connection.
func (m *muxListener) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case err := <-m.errc:
		m.errc <- err // every later Accept fails the same way
		return nil, err
	case <-m.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and waits for the sorting goroutines.
func (m *muxListener) Close() error {
	var err error
	m.once.Do(func() {
		m.mu.Lock()
		close(m.done)
		for c := range m.sorting {
			c.Close()
		}
		m.mu.Unlock()
		err = m.Listener.Close()
		m.wg.Wait()
	})
	return err
}

// prefixConn gives back the bytes read to sort a connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// plainPolicy limits what a request that arrived without TLS may do:
// with api.tls set, nothing but be sent to HTTPS; otherwise anything but
// a store write from another host, whose fence token would cross the
// network in the clear. The calls between nodes check for themselves
// (scheduler/rpc.Server admits only the cluster's certificates).
func (s *Server) plainPolicy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.TLS != nil:
		case s.PublicTLS != nil:
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, "https://"+r.Host+r.URL.RequestURI(), http.StatusPermanentRedirect)
				return
			}
			s.api.Error(w, r, api.BadRequest("this node serves its API over HTTPS (api.tls): send the request to https://%s", r.Host))
			return
		case isStoreWrite(r) && !auth.IsLoopbackClient(r):
			s.api.Error(w, r, fmt.Errorf("%w: a store write from another host must come over TLS, so its fence token never crosses the network in the clear: use https:// and the cluster CA (FENCECRON_STORE_CA), as `fencecron publish` does", wire.ErrForbidden))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func isStoreWrite(r *http.Request) bool {
	p := r.URL.Path
	return (r.Method == http.MethodPut && strings.HasPrefix(p, "/api/v1/store/")) ||
		(r.Method == http.MethodPost && (strings.HasPrefix(p, "/api/v1/establish/") || p == "/api/v1/floor"))
}
