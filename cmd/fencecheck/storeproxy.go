package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/fencemodel"
)

// StoreProxy stands between the workers and the store node. It injects
// the store link's faults at the level of whole calls (ProxyHold holds
// calls and Release delivers them in a random order; ProxyDown cuts calls
// in flight and refuses new ones), and it records every establish and
// publish as the clients saw it: a porcupine operation whose call is the
// moment the request left for the store and whose return is the moment
// the answer came back. That history does not rely on the store's own
// record of its decisions.
type StoreProxy struct {
	// Target is the store's base URL, "https://host:port".
	Target string
	signer *fencedstore.Signer
	client *http.Client

	ln   net.Listener
	srv  *http.Server
	done chan struct{}

	mu      sync.Mutex
	mode    string
	held    []chan struct{}
	cancels map[*context.CancelFunc]bool
	// Held counts calls ever held, Cut calls cut in flight or refused.
	Held, Cut int

	clock atomic.Int64
	ids   atomic.Int64
	recMu sync.Mutex
	ops   []porcupine.Operation
}

// ListenStoreProxy starts a store proxy on addr in pass mode. The signer
// reads the tokens of the calls (it holds the cluster secret). With id,
// the proxy speaks TLS on both sides as a node of the cluster does, so
// nodes and jobs reach it as they reach the store; without, plain HTTP
// (the checkers' tests, with a store in the test process).
func ListenStoreProxy(addr, target string, signer *fencedstore.Signer, id *clustertls.Identity) (*StoreProxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	if id != nil {
		ln = tls.NewListener(ln, id.LinkServerConfig())
		tr.TLSClientConfig = id.LinkClientConfig("")
	}
	p := &StoreProxy{
		Target: strings.TrimRight(target, "/"), signer: signer, ln: ln, done: make(chan struct{}),
		mode: ProxyPass, cancels: map[*context.CancelFunc]bool{},
		client: &http.Client{Timeout: time.Minute, Transport: tr},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *StoreProxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy; calls in flight are cut.
func (p *StoreProxy) Close() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	close(p.done)
	p.SetMode(ProxyDown)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.srv.Shutdown(ctx)
}

// Mode returns the current mode.
func (p *StoreProxy) Mode() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetMode switches to ProxyPass, ProxyDown or ProxyHold. Going down cuts
// the calls in flight; leaving hold releases held calls in arrival order.
func (p *StoreProxy) SetMode(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == ProxyHold && mode != ProxyHold {
		deliverAll(p.held)
		p.held = nil
	}
	p.mode = mode
	if mode == ProxyDown {
		for c := range p.cancels {
			(*c)()
			p.Cut++
		}
	}
}

// Release ends hold: held calls go to the store one by one, in an order
// drawn from rng, each up to gap after the previous. It returns how many
// were held.
func (p *StoreProxy) Release(rng *rand.Rand, gap time.Duration) int {
	p.mu.Lock()
	held := p.held
	p.held = nil
	p.mode = ProxyPass
	p.mu.Unlock()
	return deliverShuffled(held, rng, gap, p.done)
}

// Quiesce stops the store's traffic for good: new calls are refused and
// those in flight cut. It returns once no call is in flight, then waits
// settle, so a store handler still finishing a cut call is done: after
// it, the store's state, its history and Operations describe one moment.
func (p *StoreProxy) Quiesce(settle time.Duration) {
	p.SetMode(ProxyDown)
	for {
		p.mu.Lock()
		n := len(p.cancels)
		p.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(settle)
}

func (p *StoreProxy) cutCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Cut
}

// Operations returns the calls recorded so far.
func (p *StoreProxy) Operations() []porcupine.Operation {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	return append([]porcupine.Operation(nil), p.ops...)
}

// abort drops the client's connection without an answer: to the client
// it looks like the network failed, as it would without the proxy.
func abort() { panic(http.ErrAbortHandler) }

// admit waits while calls are held; it reports false when the call must
// be cut instead. On true, the call is registered and cancel ends it when
// the link goes down; call done when it is over.
func (p *StoreProxy) admit(cancel *context.CancelFunc) (done func(), ok bool) {
	p.mu.Lock()
	for p.mode == ProxyHold {
		ch := make(chan struct{})
		p.held = append(p.held, ch)
		p.Held++
		p.mu.Unlock()
		select {
		case <-ch:
		case <-p.done:
			return nil, false
		}
		p.mu.Lock()
	}
	if p.mode == ProxyDown {
		p.Cut++
		p.mu.Unlock()
		return nil, false
	}
	p.cancels[cancel] = true
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.cancels, cancel)
		p.mu.Unlock()
	}, true
}

// ServeHTTP forwards one call to the store, recording it if it is a
// write.
func (p *StoreProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		abort()
	}
	in, isWrite := p.input(r, body)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	done, ok := p.admit(&cancel)
	if !ok {
		abort()
	}
	defer done()

	out, err := http.NewRequestWithContext(ctx, r.Method, p.Target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		abort()
	}
	for _, h := range []string{"Content-Type", "Authorization", "Fencecron-Token", "If-Match", "Accept"} {
		if v := r.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	call := p.clock.Add(1)
	resp, err := p.client.Do(out)
	if err != nil {
		// A call that never reached the store did nothing; any other
		// failure leaves its outcome unknown.
		var op *net.OpError
		if isWrite && !(errors.As(err, &op) && op.Op == "dial") {
			p.record(in, call, fencemodel.Output{Unknown: true})
		}
		abort()
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		if isWrite {
			p.record(in, call, fencemodel.Output{Unknown: true})
		}
		abort()
	}
	if isWrite {
		p.recordAnswer(in, call, resp.StatusCode, answer)
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
}

// input reads what a write asks for: the verified token, its attempt and
// expiry, the key, the body's hash and any expected version.
func (p *StoreProxy) input(r *http.Request, body []byte) (fencemodel.Input, bool) {
	in := fencemodel.Input{Expected: fencemodel.NoVersion}
	switch {
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/api/v1/store/"):
		in.Kind, in.Key, in.Hash = fencemodel.Publish, strings.TrimPrefix(r.URL.Path, "/api/v1/store/"), fencedstore.Hash(body)
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/api/v1/establish/"):
		in.Kind, in.Key = fencemodel.Establish, strings.TrimPrefix(r.URL.Path, "/api/v1/establish/")
	default:
		return in, false
	}
	st, err := p.signer.Verify(r.Header.Get("Fencecron-Token"))
	if err != nil {
		return in, false // refused by the store without a decision
	}
	in.Token, in.Attempt, in.Expires = st.Token, st.Attempt, st.Expires
	if im := r.Header.Get("If-Match"); im != "" {
		if v, err := strconv.ParseUint(strings.Trim(im, `"`), 10, 64); err == nil && v <= math.MaxInt64 {
			in.Expected = int64(v)
		}
	}
	return in, true
}

// recordAnswer records a write the store answered: a decision (200, 409,
// 412), an unknown outcome (5xx), or nothing for a request it refused
// without deciding (4xx: bad token, out of scope).
func (p *StoreProxy) recordAnswer(in fencemodel.Input, call int64, status int, answer []byte) {
	switch status {
	case http.StatusOK, http.StatusConflict, http.StatusPreconditionFailed:
		var res fencedstore.Result
		if err := json.Unmarshal(answer, &res); err != nil {
			p.record(in, call, fencemodel.Output{Unknown: true})
			return
		}
		p.record(in, call, fencemodel.Output{Outcome: res.Outcome, Version: res.Version, Greatest: res.Greatest})
	default:
		if status >= 500 {
			p.record(in, call, fencemodel.Output{Unknown: true})
		}
	}
}

func (p *StoreProxy) record(in fencemodel.Input, call int64, out fencemodel.Output) {
	ret := p.clock.Add(1)
	if out.Unknown {
		ret = math.MaxInt64
	}
	id := int(p.ids.Add(1))
	p.recMu.Lock()
	p.ops = append(p.ops, porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
	p.recMu.Unlock()
}
