package web

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/election/clustertls/clustertlstest"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/fencedstore/storetest"
)

// BenchmarkStoreLink_Publish1KiB is the store's parallel publish rate
// through a node's real HTTP port, as another node reaches it: over plain
// HTTP with the bearer store credential (how every node did before links
// were authenticated; still served to loopback clients), and over mutual
// TLS. Every decision is fsynced by bolt, as in production.
func BenchmarkStoreLink_Publish1KiB(b *testing.B) {
	for _, link := range []string{"plain", "mtls"} {
		b.Run(link, func(b *testing.B) {
			store := bolt.New(filepath.Join(b.TempDir(), "store.db"))
			if err := store.Open(); err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			signer, err := fencedstore.NewSigner(clustertlstest.Secret)
			if err != nil {
				b.Fatal(err)
			}
			f := newFixture(b)
			srv := &Server{
				Addr: "127.0.0.1:0", Cluster: f.srv.Cluster, State: f.state, Scheduler: f.sched, Store: store,
				StoreAPI: &httpstore.Handler{Store: store, Signer: signer, Logger: f.srv.Logger},
				Logger:   f.srv.Logger, TLS: testPeerID,
			}
			if err := srv.Open(); err != nil {
				b.Fatal(err)
			}
			defer srv.Close(b.Context())
			addr := strings.TrimPrefix(srv.URL(), "http://")
			tr := &http.Transport{MaxIdleConnsPerHost: 256}
			base := "http://" + addr
			if link == "mtls" {
				tr.TLSClientConfig = stubID.ClientConfig(clustertls.ProtoHTTP, "w1")
				base = "https://" + addr
			}
			c := httpstore.NewClient(base, signer)
			c.HTTP = &http.Client{Timeout: time.Minute, Transport: tr}
			storetest.BenchPublish(b, c, true, 32)
			// Shutting down (which waits for connections the client
			// opened and never used) is not publishing.
			b.StopTimer()
			tr.CloseIdleConnections()
		})
	}
}
