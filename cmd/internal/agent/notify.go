package agent

import (
	"net"
	"strconv"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/scheduler/notify"
)

// notifyConfig is how this node sends notifications when it leads: the
// config's notify: section, and links to its own dashboard unless the
// section names another.
func notifyConfig(cfg *config.File, advertise string) notify.Config {
	n := cfg.Notify
	c := notify.Config{
		SMTP: notify.SMTPConfig{Host: n.Host, Port: n.SMTPPort(), From: n.From,
			Username: n.Username, Password: n.Password, StartTLS: n.StartTLS},
		DashboardURL: n.DashboardURL,
	}
	if port := cfg.Node.Ports.HTTP; c.DashboardURL == "" && port > 0 {
		scheme := "http"
		if cfg.API.TLS.CertFile != "" {
			scheme = "https"
		}
		host := advertise
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		c.DashboardURL = scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
	}
	return c
}
