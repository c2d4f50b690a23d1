// Package clustertlstest gives tests cluster identities: what every
// package whose tests speak the links between nodes (election, web,
// scheduler/rpc) needs, made one way.
package clustertlstest

import "github.com/fencecron/fencecron/election/clustertls"

// Secret is the cluster secret of the tests' nodes.
var Secret = []byte("fencecron-test-cluster-secret-0123456789abcdef")

// Identity is node name's identity in the cluster of secret (with the
// previous secret of a roll, if any). It panics on an error, which only a
// bad test can cause.
func Identity(name string, secret []byte, previous ...[]byte) *clustertls.Identity {
	c := clustertls.Config{NodeName: name, Secret: secret}
	if len(previous) > 0 {
		c.PreviousSecret = previous[0]
	}
	id, err := clustertls.Load(c)
	if err != nil {
		panic(err)
	}
	return id
}
