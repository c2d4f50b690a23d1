package web

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// haltedState is a replicated state whose log halted at an entry of a
// newer format.
type haltedState struct{ *fakeState }

func (haltedState) Halted() error {
	return errors.New("stopped applying the replicated log at index 12: entry 12 is of log format version 3")
}

// A node whose replicated log halted is not ready, whatever the cluster
// says, and /readyz says why.
func TestServer_ReadyzFailsWhenTheLogHalted(t *testing.T) {
	f := newFixture(t, func(s *Server) { s.State = haltedState{newFakeState()} })
	resp, err := http.Get(f.http.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "log format version 3") {
		t.Errorf("/readyz = %d %q, want 503 saying why", resp.StatusCode, body)
	}
}
