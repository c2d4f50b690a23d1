package config

import (
	"slices"
	"testing"
)

// TestParse_JoinByName: node.join takes host names and bare hosts as well
// as IP:port; election resolves names on every attempt to join.
func TestParse_JoinByName(t *testing.T) {
	join := []string{"10.0.0.2:7946", "fc2.example.internal:7946", "localhost:7956", "fencecron-2.fencecron-peers", "10.0.0.4", "[::1]:7946"}
	f := MustParse(t, "node: {join: ['"+join[0]+"', '"+join[1]+"', '"+join[2]+"', '"+join[3]+"', '"+join[4]+"', '"+join[5]+"']}\ncluster: {secret: correct-horse-battery-staple-0123456789}\n")
	if !slices.Equal(f.Node.Join, join) {
		t.Errorf("join = %v, want %v", f.Node.Join, join)
	}
	for _, bad := range []string{"a_b:7946", ":7946", "host:0", "host:x", "http://host:7946"} {
		if err := checkJoinAddr(bad); err == nil {
			t.Errorf("checkJoinAddr(%q) = nil, want an error", bad)
		}
	}
}
