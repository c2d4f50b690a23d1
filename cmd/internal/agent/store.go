package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/fencedstore/postgres"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// openStore opens the fenced store the config selects: the embedded bolt
// file (default), PostgreSQL, or the store another node serves.
func (n *node) openStore() error {
	s := n.cfg.Store
	n.maxBody = s.MaxBodyBytes
	switch s.Backend {
	case config.BackendBolt:
		b := bolt.New(n.cfg.StorePath())
		b.MaxBodyBytes, b.HistoryRetention, b.KeepVersions = s.MaxBodyBytes, s.HistoryRetention, s.KeepVersions
		if err := b.Open(); err != nil {
			return err
		}
		n.store = b
		n.closeWith("store", func(context.Context) error { return b.Close() })
	case config.BackendPostgres:
		p := postgres.New(s.URL)
		p.MaxBodyBytes, p.HistoryRetention, p.KeepVersions = s.MaxBodyBytes, s.HistoryRetention, s.KeepVersions
		if err := p.Open(); err != nil {
			return err
		}
		n.store = p
		n.closeWith("store", func(context.Context) error { return p.Close() })
	case config.BackendRemote:
		if n.signer == nil {
			return fmt.Errorf("store backend remote needs cluster.secret to sign tokens")
		}
		c := httpstore.NewClient(clusterURL(s.URL), n.signer)
		c.HTTP = clusterHTTPClient(n.id)
		n.store = c
		n.closeWith("store client", func(context.Context) error { c.HTTP.CloseIdleConnections(); return nil })
	default:
		return fmt.Errorf("unknown store backend %q", s.Backend)
	}
	return nil
}

// clusterURL is the URL nodes and jobs use for the store another node
// serves: always https, whatever scheme store.url was written with, because
// fence tokens and the store credential must not cross the network in the
// clear.
func clusterURL(u string) string {
	u = httpstore.NormalizeURL(u)
	if rest, ok := strings.CutPrefix(u, "http://"); ok {
		return "https://" + rest
	}
	return u
}

// clusterHTTPClient is an HTTP client of another node's API: TLS with this
// node's certificate, the server verified as a node of the cluster.
func clusterHTTPClient(id *clustertls.Identity) *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     id.HTTP2ClientConfig(""),
			TLSHandshakeTimeout: 10 * time.Second,
			// One connection per peer carries every call (HTTP2ClientConfig).
			ForceAttemptHTTP2:   true,
			HTTP2:               clustertls.HTTP2Health(),
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		},
	}
}

// TokenText is the worker's TokenText hook: the attempt's token
// (Assignment.SignedToken) signed with the node's key, for
// FENCECRON_TOKEN.
func TokenText(signer *fencedstore.Signer, log *slog.Logger) func(worker.Assignment) string {
	return func(a worker.Assignment) string {
		text, err := signer.Sign(a.SignedToken())
		if err != nil {
			log.Error("cannot sign the attempt's token; the job gets none", a.Attempt.LogArgs("err", err)...)
			return ""
		}
		return text
	}
}
