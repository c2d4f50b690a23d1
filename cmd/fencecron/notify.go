package main

import (
	"net"
	"strconv"

	"github.com/fencecron/fencecron/scheduler"
)

// notifyConfig is how this node sends notifications when it leads: the
// config's notify: section, and links to its own dashboard unless the
// section names another.
func notifyConfig(o nodeOptions, advertise string) scheduler.NotifyConfig {
	n := o.Notify
	c := scheduler.NotifyConfig{
		SMTP: scheduler.SMTPConfig{Host: n.Host, Port: n.SMTPPort(), From: n.From,
			Username: n.Username, Password: n.Password, StartTLS: n.StartTLS},
		DashboardURL: n.DashboardURL,
	}
	if c.DashboardURL == "" && o.HTTPPort > 0 {
		scheme := "http"
		if o.PublicTLS.CertFile != "" {
			scheme = "https"
		}
		host := advertise
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		c.DashboardURL = scheme + "://" + net.JoinHostPort(host, strconv.Itoa(o.HTTPPort))
	}
	return c
}
