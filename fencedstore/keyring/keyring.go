// Package keyring derives every key fencecron uses from a secret, in one
// way: HKDF-SHA256 (RFC 5869) with one label per use, so that no key
// reveals the secret or another key, and no two uses ever share one.
//
// The cluster secret (cluster.secret, and cluster.previous_secret during a
// roll) keys everything between nodes: gossip encryption (election), the
// cluster CA the links' TLS certificates come from (election/clustertls),
// the fence-token signing key and the store credential (fencedstore). The
// API token (api.token) keys the dashboard's sessions (web). A new label,
// or a new length for one, is a new key: everything signed or encrypted
// under the old one stops being accepted.
//
// It imports nothing of fencecron's, so the store, the election and the
// web server can all use it.
package keyring

import (
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
)

// Use is what a derived key is for. Each has its own label and length.
type Use int

// The uses of a derived key.
const (
	// Gossip is memberlist's AES-256 key for gossip encryption.
	Gossip Use = iota + 1
	// TokenSigning is the HMAC-SHA256 key fence tokens are signed with.
	TokenSigning
	// StoreCredential is what nodes present to a store they write to
	// ("Authorization: Bearer", base64url).
	StoreCredential
	// ClusterCAKey is the Ed25519 seed of the cluster CA derived from the
	// secret.
	ClusterCAKey
	// ClusterCASerial is that CA certificate's serial number.
	ClusterCASerial
	// Fingerprint names a secret without revealing it: nodes tell each
	// other in gossip which secrets they hold.
	Fingerprint
	// Session is the HMAC-SHA256 key of the dashboard's session cookies
	// and CSRF tokens, derived from the API token: a new token ends every
	// session.
	Session
)

// uses holds each use's HKDF label and key length: the one place where
// either is written.
var uses = map[Use]struct {
	label string
	size  int
}{
	Gossip:          {"fencecron keyring v1: gossip encryption", 32},
	TokenSigning:    {"fencecron keyring v1: fence-token signing", 32},
	StoreCredential: {"fencecron keyring v1: store credential", 32},
	ClusterCAKey:    {"fencecron keyring v1: cluster CA key", 32},
	ClusterCASerial: {"fencecron keyring v1: cluster CA serial", 16},
	Fingerprint:     {"fencecron keyring v1: secret fingerprint", 8},
	Session:         {"fencecron keyring v1: dashboard session", 32},
}

// Label returns the HKDF label of u.
func (u Use) Label() string { return uses[u].label }

// Size returns the length in bytes of u's key.
func (u Use) Size() int { return uses[u].size }

// Derive returns the key for u derived from secret: HKDF-SHA256 with no
// salt, info u.Label() and length u.Size(). The same secret and use always
// give the same key. It panics for a Use not declared above.
func Derive(secret []byte, u Use) []byte {
	spec, ok := uses[u]
	if !ok {
		panic(fmt.Sprintf("keyring: unknown use %d", u))
	}
	key, err := hkdf.Key(sha256.New, secret, nil, spec.label, spec.size)
	if err != nil {
		// hkdf.Key fails only for lengths beyond 255 hashes, or, in FIPS
		// 140-only mode, for a secret under 112 bits, which every secret
		// it is given here exceeds (CheckSecret asks for 32 bytes).
		panic(fmt.Sprintf("keyring: derive %s: %v", spec.label, err))
	}
	return key
}
