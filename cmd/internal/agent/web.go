package agent

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/web"
)

// loadPublicTLS reads api.tls's certificate; nil without one.
func loadPublicTLS(f config.TLSFiles) (*tls.Config, error) {
	if f.CertFile == "" && f.KeyFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("api.tls: %w", err)
	}
	return clustertls.PublicServerConfig(cert), nil
}

// accessLine says who may read and who may change things through the
// public API of a node listening on bind with the api section a.
func accessLine(bind string, a config.API) string {
	reach := "anyone who can reach " + bind
	switch ip := net.ParseIP(bind); {
	case ip != nil && ip.IsLoopback():
		reach = "only this host (bound to " + bind + ")"
	case ip != nil && ip.IsUnspecified():
		reach = "anyone who can reach any of this host's addresses"
	}
	names := "loopback names, IP addresses, the node's name"
	if len(a.AllowedHosts) > 0 {
		names += " and api.allowed_hosts"
	}
	read := "read: " + reach + ", addressing it by " + names + " (plain HTTP)"
	switch {
	case a.ReadOnly:
		return read + "; change: nobody, read-only (api.read_only)"
	case a.Token != "":
		return read + "; change: token-protected, only with the API token (api.token, or a dashboard login)"
	}
	return read + "; change: loopback-only, no API token: clients on this host without one, nobody else (set api.token to allow other hosts)"
}

// webLimits is the config's api.limits for the web server; zero fields
// take web.DefaultLimits there.
func webLimits(l config.Limits) web.Limits {
	return web.Limits{
		ReadHeaderTimeout: l.ReadHeaderTimeout, ReadTimeout: l.ReadTimeout, WriteTimeout: l.WriteTimeout, IdleTimeout: l.IdleTimeout,
		MaxHeaderBytes: int(l.MaxHeaderBytes), MaxConnections: l.MaxConnections, MaxConnectionsPerClient: l.MaxConnectionsPerClient,
		MaxEventStreams: l.MaxEventStreams,
		EventHeartbeat:  l.EventHeartbeat,
	}
}

func netJoin(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
