package keyring_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"testing"

	"github.com/fencecron/fencecron/fencedstore/keyring"
)

var allUses = []keyring.Use{
	keyring.Gossip, keyring.TokenSigning, keyring.StoreCredential,
	keyring.ClusterCAKey, keyring.ClusterCASerial, keyring.Fingerprint, keyring.Session,
}

// Every use has its own label and key, of its own length, and the same
// secret always gives the same keys.
func TestDerive(t *testing.T) {
	secret := []byte("correct-horse-battery-staple-0123456789")
	other := []byte("correct-horse-battery-staple-0123456780")
	labels := map[string]keyring.Use{}
	keys := map[string]keyring.Use{}
	for _, u := range allUses {
		if prev, dup := labels[u.Label()]; dup {
			t.Errorf("uses %d and %d share the label %q", prev, u, u.Label())
		}
		labels[u.Label()] = u
		k := keyring.Derive(secret, u)
		if got, want := len(k), u.Size(); got != want || want == 0 {
			t.Errorf("use %d: key of %d bytes, want %d", u, got, want)
		}
		if !bytes.Equal(k, keyring.Derive(secret, u)) {
			t.Errorf("use %d: two derivations differ", u)
		}
		if bytes.Equal(k, keyring.Derive(other, u)) {
			t.Errorf("use %d: two secrets give the same key", u)
		}
		if bytes.Contains(k, secret[:8]) {
			t.Errorf("use %d: the key holds the secret", u)
		}
		// Different uses, different keys (compared on the shortest length).
		id := hex.EncodeToString(k[:8])
		if prev, dup := keys[id]; dup {
			t.Errorf("uses %d and %d derive the same key", prev, u)
		}
		keys[id] = u
	}
	if got, want := keyring.ClusterCAKey.Size(), ed25519.SeedSize; got != want {
		t.Errorf("cluster CA key is %d bytes; an Ed25519 seed is %d", got, want)
	}
}

// The derivation is plain HKDF-SHA256 with the label as info and no salt,
// pinned on one value computed outside Go (RFC 5869 by hand with Python's
// hmac): PRK = HMAC(0^32, secret), OKM = HMAC(PRK, label || 0x01). A
// change here changes every key of every cluster.
func TestDerive_IsHKDF(t *testing.T) {
	secret := []byte("correct-horse-battery-staple-0123456789")
	const want = "28c5d64bc5e8c1778cace7108f4e561ff0ef9f0501f9b8163817ef341540ae81"
	if got := hex.EncodeToString(keyring.Derive(secret, keyring.TokenSigning)); got != want {
		t.Errorf("TokenSigning = %s, want %s", got, want)
	}
}

func TestDerive_UnknownUse(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Derive of an undeclared use did not panic")
		}
	}()
	keyring.Derive([]byte("x"), keyring.Use(99))
}
