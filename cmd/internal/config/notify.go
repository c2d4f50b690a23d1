package config

import (
	"fmt"
	"net"
	"net/mail"
	"net/url"

	"github.com/fencecron/fencecron/jobs"
)

// Notify is the cluster-wide notify: section: the SMTP server that email
// notifications go through, and the base of the dashboard links they
// carry. Every server node should say the same: whichever leads sends.
type Notify struct {
	Host string `yaml:"host"`
	// Port defaults to 587 with starttls, 25 without.
	Port     int    `yaml:"port"`
	From     string `yaml:"from"`
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// StartTLS upgrades the connection to TLS before anything else is
	// sent, and refuses a server that does not offer it.
	StartTLS bool `yaml:"starttls"`
	// DashboardURL is the base of the links to runs, such as
	// https://cron.example.com; default http://<advertise>:<http port>.
	DashboardURL string `yaml:"dashboard_url"`
}

// SMTPPort is the port to use: Port, or the default for StartTLS.
func (n Notify) SMTPPort() int {
	switch {
	case n.Port != 0:
		return n.Port
	case n.StartTLS:
		return 587
	}
	return 25
}

// checkNotify checks the notify section.
func (d *decoder) checkNotify(n *Notify) {
	bad := func(field, format string, args ...any) {
		p := "notify." + field
		if !d.failed[p] {
			d.errorf(d.at(p), p, format, args...)
		}
	}
	if n.Host == "" && (n.From != "" || n.Username != "" || n.Port != 0 || n.StartTLS) {
		bad("host", "required: the SMTP server's host name or address")
	}
	if n.Host != "" {
		if n.From == "" {
			bad("from", "required: the sender address of notification emails")
		} else if _, err := mail.ParseAddress(n.From); err != nil {
			bad("from", "%q is not an address: %v", clip(n.From, 80), err)
		}
	}
	if n.Port < 0 || n.Port > 65535 {
		bad("port", "%d: want 1 to 65535 (leave it out for 25, or 587 with starttls)", n.Port)
	}
	if n.Password != "" && n.Username == "" {
		bad("username", "required with a password")
	}
	if n.Username != "" && !n.StartTLS && !isLoopbackHost(n.Host) {
		bad("starttls", "credentials would cross the network in clear: set starttls: true (only a server on this host may be used without)")
	}
	if n.DashboardURL != "" {
		if u, err := url.Parse(n.DashboardURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("dashboard_url", "%q: want an http:// or https:// URL with a host", clip(n.DashboardURL, 80))
		}
	}
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// checkAfter reports the problems of the dependencies between the
// file's jobs (jobs.CheckAfter) at the after list they concern.
func (d *decoder) checkAfter(entries []jobEntry, specs []jobs.Spec) {
	for _, p := range jobs.CheckAfter(specs) {
		// By place, not by name: a second job of the same name has its
		// own after list, on its own lines.
		path := fmt.Sprintf("%s.after[%d]", entries[p.Spec].path, p.Index)
		if !d.failed[path] {
			d.errorf(d.at(path), path, "%s", p.Msg)
		}
	}
}
