package agent

import (
	"strings"
	"testing"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/web"
)

// The reference config shows every api.limits field at its default: the
// values it shows are the web server's DefaultLimits.
func TestReferenceLimitsAreTheDefaults(t *testing.T) {
	t.Setenv("FENCECRON_SECRET", "a-secret-of-at-least-32-bytes-0123456789")
	f, err := config.Load("../../../deploy/examples/fencecron.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := webLimits(f.API.Limits); got != web.DefaultLimits {
		t.Errorf("reference api.limits = %+v\nweb.DefaultLimits  = %+v", got, web.DefaultLimits)
	}
}

// The startup log says who may read and who may change.
func TestAccessLine(t *testing.T) {
	tests := []struct {
		bind string
		api  config.API
		want []string
	}{
		{"127.0.0.1", config.API{}, []string{"read: only this host (bound to 127.0.0.1)", "change: loopback-only, no API token", "set api.token"}},
		{"0.0.0.0", config.API{}, []string{"read: anyone who can reach any of this host's addresses", "change: loopback-only"}},
		{"10.0.0.5", config.API{Token: "t", AllowedHosts: []string{"cron.example.com"}}, []string{
			"read: anyone who can reach 10.0.0.5", "and api.allowed_hosts", "change: token-protected"}},
		{"10.0.0.5", config.API{Token: "t", ReadOnly: true}, []string{"change: nobody, read-only (api.read_only)"}},
	}
	for _, tc := range tests {
		got := accessLine(tc.bind, tc.api)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("accessLine(%s, %+v) = %q, want it to contain %q", tc.bind, tc.api, got, w)
			}
		}
	}
}
