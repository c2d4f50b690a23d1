package web

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A plain-HTTP request naming a host that is not this node's is refused
// with 421 before any handler runs: the DNS-rebinding attack of issue 11
// (PUT /api/v1/jobset with Host and Origin attacker.example) changes
// nothing, and reads are refused too. Loopback names, IP addresses, the
// node's own names and api.allowed_hosts pass; TLS is exempt.
func TestServer_HostCheck(t *testing.T) {
	f := newFixture(t, func(s *Server) {
		s.AdvertiseHosts = []string{"n2", "10.0.0.2"}
		s.AllowedHosts = []string{"cron.example.com", "proxy.example.com:8443"}
	})
	jobset := `{"source":"attacker","jobs":[]}`

	code, hdr, body := f.do(t, "PUT", "/api/v1/jobset", jobset, "Host", "attacker.example", "Origin", "http://attacker.example")
	if code != http.StatusMisdirectedRequest {
		t.Fatalf("rebinding PUT /api/v1/jobset = %d, want 421\n%s", code, body)
	}
	var answer struct{ Error string }
	if err := json.Unmarshal([]byte(body), &answer); err != nil || !strings.Contains(answer.Error, "api.allowed_hosts") ||
		!strings.Contains(answer.Error, `"attacker.example"`) || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Errorf("refusal = %q (%v), want JSON naming the host and api.allowed_hosts", body, err)
	}
	if calls := f.sched.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler saw %q: the handler ran", calls)
	}

	tests := []struct {
		host string
		want int
	}{
		{"attacker.example:8080", 421},
		{"attacker.example.", 421},
		{"n2.attacker.example", 421},
		{"localhost.attacker.example", 421},
		{"proxy.example.com:8080", 421}, // allowed only with port 8443
		{"localhost:8080", 200},
		{"LocalHost.", 200},
		{"dashboard.localhost:8080", 200},
		{"127.0.0.1:8080", 200},
		{"127.9.9.9", 200},
		{"[::1]:8080", 200},
		{"192.0.2.7:8080", 200}, // an IP address is never a rebound name
		{"n2:8080", 200},
		{"N2", 200},
		{"10.0.0.2:8080", 200},
		{"cron.example.com", 200},
		{"cron.example.com:9999", 200},
		{"proxy.example.com:8443", 200},
	}
	for _, tc := range tests {
		if code, _, body := f.do(t, "GET", "/api/v1/status", "", "Host", tc.host); code != tc.want {
			t.Errorf("GET /api/v1/status with Host %q = %d, want %d\n%s", tc.host, code, tc.want, body)
		}
	}

	// Over TLS the name is the certificate's business.
	req := httptest.NewRequest("GET", "/api/v1/status", nil)
	req.Host, req.TLS = "attacker.example", &tls.ConnectionState{}
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("TLS request with Host attacker.example = %d, want 200", rec.Code)
	}
}
