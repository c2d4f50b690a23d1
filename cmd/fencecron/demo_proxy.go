package main

import (
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
)

// proxy is the dashboard's front door: it forwards to one server, the
// same one as long as its process runs, and to another once the story
// has killed it. Every server serves the whole dashboard from its own
// replica of the state, so the page stays up while the leader dies.
func (d *demo) proxy() http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u, _ := url.Parse(d.frontNode().URL())
			pr.SetURL(u)
			// The node checks the Host the browser sent (DNS rebinding):
			// pass it on rather than the node's own address.
			pr.Out.Host = pr.In.Host
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "fencecron demo: the server behind the dashboard did not answer ("+err.Error()+"); reload in a moment", http.StatusBadGateway)
		},
	}
}

// frontNode returns the server the dashboard shows, switching when its
// process has gone.
func (d *demo) frontNode() *localcluster.Node {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.front != nil && d.front.Running() && !d.front.Stopped() {
		return d.front
	}
	d.front = d.api()
	return d.front
}
