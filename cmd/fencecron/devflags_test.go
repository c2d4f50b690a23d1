package main

import (
	"strings"
	"testing"
)

// `fencecron dev -api-token` takes the same rules as api.token: a weak
// token stops it before anything starts.
func TestDev_RefusesWeakAPIToken(t *testing.T) {
	for token, want := range map[string]string{
		"short-token":           "-api-token: 11 bytes: want at least 32",
		strings.Repeat("a", 40): "-api-token: only 1 distinct bytes",
	} {
		var out, errOut strings.Builder
		err := run(t.Context(), []string{"dev", "-data", t.TempDir(), "-http", "127.0.0.1:0", "-api-token", token}, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), token) {
			t.Errorf("dev -api-token %q: err = %v, want %q without the token", token, err, want)
		}
	}
}
