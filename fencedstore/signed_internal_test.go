package fencedstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A token outside the range, or with a whole-store scope, is refused by
// Verify even with a valid MAC: such a token could only come from a
// signer with a bug, or from before the checks existed. The test signs the
// body itself, past Sign's own checks.
func TestSigner_VerifyRefusesWhatSignWouldNot(t *testing.T) {
	s, err := NewSigner([]byte("0123456789abcdef-test-cluster-secret"))
	if err != nil {
		t.Fatal(err)
	}
	signBody := func(epoch, seq uint64, prefix string) string {
		body := fmt.Sprintf("%s.%d.%d.%d.%s.%s~%s", tokenVersion, epoch, seq, 1782897150,
			b64.EncodeToString([]byte("a")), b64.EncodeToString([]byte("j")), b64.EncodeToString([]byte(prefix)))
		return body + "." + b64.EncodeToString(s.mac(body))
	}
	if _, err := s.Verify(signBody(1<<63-1, 1<<63-1, "reports/")); err != nil {
		t.Fatalf("the hand-signed control token does not verify: %v", err)
	}
	for _, tc := range []struct {
		name, text, why string
	}{
		{"epoch 2^63", signBody(1<<63, 1, "reports/"), "out of range"},
		{"seq 2^63", signBody(1, 1<<63, "reports/"), "out of range"},
		{"epoch 2^63+3", signBody(1<<63+3, 7, "reports/"), "out of range"},
		{"whole-store scope", signBody(1, 1, ""), "no token may write every key"},
	} {
		_, err := s.Verify(tc.text)
		if !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: err = %v, want ErrBadToken saying %q", tc.name, err, tc.why)
		}
	}
}
