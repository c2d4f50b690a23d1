package web

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/api"
)

// DNS rebinding: a page on attacker.example makes its own name resolve
// to 127.0.0.1 (or to a node's address on the visitor's network) after
// it has loaded. The visitor's browser then treats this node as the
// page's own origin: it sends the page's requests here and lets the page
// read the answers, and same-origin checks (Origin, Sec-Fetch-Site) see
// nothing wrong. What the browser cannot hide is the name it thinks it
// talks to: the Host header says attacker.example.
//
// So a plain-HTTP request is served only if its Host names this node:
//   - a loopback name: localhost or *.localhost (browsers resolve those
//     themselves), 127.0.0.0/8, ::1;
//   - any IP address: a browser sends an IP address as Host only when
//     the user typed it, never because a name was rebound;
//   - the node's own names (Server.AdvertiseHosts: its node name and
//     advertised address), with any port;
//   - an api.allowed_hosts entry (Server.AllowedHosts): a host matches
//     with any port, a host:port only with that port.
//
// Names compare case-insensitively, a final dot ignored. Requests over
// TLS are exempt: a rebound name cannot present this node's certificate.
// Requests without a Host (HTTP/1.0) pass: no browser sends those.

// checkHost refuses a plain-HTTP request whose Host header names none of
// the above, with 421 Misdirected Request, before any handler runs.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil || s.hostAllowed(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		s.Logger.Debug("request for another host refused", "host", r.Host, "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
		err := fmt.Errorf("%w: this node does not answer to the name %q over plain HTTP: a web page may have pointed its own name at this address (DNS rebinding). "+
			"If %q is a name of this node, add it to api.allowed_hosts in the node's config (or reach the node by its IP address or node name)",
			wire.ErrMisdirected, r.Host, hostOnly(r.Host))
		// Always JSON, never the dashboard's error page: whoever asked by
		// a foreign name learns nothing about the cluster.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		api.WriteJSON(w, api.StatusOf(err), wire.Body(err))
	})
}

// hostAllowed reports whether a Host header value names this node (see
// the rules above).
func (s *Server) hostAllowed(hostport string) bool {
	if hostport == "" {
		return true
	}
	host, port := splitHost(hostport)
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(host) != nil {
		return true
	}
	for _, own := range s.AdvertiseHosts {
		if h, _ := splitHost(own); h != "" && h == host {
			return true
		}
	}
	for _, allowed := range s.AllowedHosts {
		h, p := splitHost(allowed)
		if h != "" && h == host && (p == "" || p == port) {
			return true
		}
	}
	return false
}

// splitHost returns the lower-case host of a Host header value or
// allowed-hosts entry, without brackets or a final dot, and its port.
func splitHost(hostport string) (host, port string) {
	host = hostport
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	}
	host = strings.TrimSuffix(strings.Trim(strings.ToLower(host), "[]"), ".")
	return host, port
}

// hostOnly is the host of a Host header value, as an operator would
// write it in api.allowed_hosts.
func hostOnly(hostport string) string {
	h, _ := splitHost(hostport)
	return h
}
