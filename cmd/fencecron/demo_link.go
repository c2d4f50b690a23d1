package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencecron/fencecron/election/clustertls"
)

// storeLink is w1's way to the store: an HTTP proxy that speaks the
// cluster's TLS on both sides, as a node does, and that can hold w1's
// publishes in flight.
//
// Why the demo needs it: a worker looks at its lease after its command
// exits and before it publishes, and a SIGSTOP from outside lands either
// before that look (w1 wakes, learns its lease is gone, and writes
// nothing) or after the write has reached the store. The dangerous pause
// is the one between the look and the write's arrival, which only a
// process's own timing can hit (a GC pause, a slow network). The link
// makes that moment happen on cue: w1's publish leaves w1, the link keeps
// it, and the demo stops w1 right then.
type storeLink struct {
	target string // the store node, https://host:port
	client *http.Client
	ln     net.Listener
	srv    *http.Server
	done   chan struct{}
	once   sync.Once

	mu      sync.Mutex
	holding bool
	release chan struct{} // closed when held publishes may go on
	arrived chan string   // the key of each publish that started to wait
}

// listenStoreLink starts a link to target on the loopback address addr
// (port 0: a free one), passing everything through until hold.
func listenStoreLink(target, secret, addr string) (*storeLink, error) {
	id, err := clustertls.Load(clustertls.Config{NodeName: "demo-store-link", Secret: []byte(secret), Hosts: []string{"127.0.0.1"}})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &storeLink{
		target:  strings.TrimRight(target, "/"),
		client:  &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: id.LinkClientConfig("")}},
		ln:      tls.NewListener(ln, id.LinkServerConfig()),
		done:    make(chan struct{}),
		arrived: make(chan string, 16),
	}
	l.srv = &http.Server{Handler: l, ReadHeaderTimeout: 10 * time.Second}
	go l.srv.Serve(l.ln)
	return l, nil
}

// URL is what w1's config names as its store.
func (l *storeLink) URL() string { return "https://" + l.ln.Addr().String() }

// hold makes publishes wait until release.
func (l *storeLink) hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.holding {
		l.holding, l.release = true, make(chan struct{})
	}
}

// let lets held publishes go on to the store, in the order they came.
func (l *storeLink) let() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holding {
		l.holding = false
		close(l.release)
	}
}

// close lets everything go and stops the link; once.
func (l *storeLink) close() {
	l.once.Do(func() {
		l.let()
		close(l.done)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.srv.Shutdown(ctx)
		l.srv.Close()
		l.client.CloseIdleConnections()
	})
}

// ServeHTTP forwards one call to the store. While holding, a publish
// waits, and when let go its connection is cut: by then w1's client has
// timed the call out or is about to (it gives a call 10s), and it sends
// the publish again. So exactly one copy reaches the store, whatever the
// pause.
func (l *storeLink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/api/v1/store/") {
		l.mu.Lock()
		holding, release := l.holding, l.release
		l.mu.Unlock()
		if holding {
			select {
			case l.arrived <- strings.TrimPrefix(r.URL.Path, "/api/v1/store/"):
			default:
			}
			select {
			case <-release:
			case <-l.done:
			case <-r.Context().Done():
			}
			panic(http.ErrAbortHandler)
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, r.Method, l.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	out.Header = r.Header.Clone()
	resp, err := l.client.Do(out)
	if err != nil {
		panic(http.ErrAbortHandler) // to w1 it looks like the network failed
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}
