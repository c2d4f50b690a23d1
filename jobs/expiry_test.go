package jobs

import (
	"testing"
	"time"
)

func TestSpec_TokenExpiry(t *testing.T) {
	granted := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		spec Spec
		want time.Time
	}{
		{"timeout and ttl", Spec{Timeout: Duration(10 * time.Minute), LeaseTTL: Duration(30 * time.Second)}, granted.Add(10*time.Minute + 30*time.Second + TokenExpiryMargin)},
		{"short job", Spec{Timeout: Duration(time.Second), LeaseTTL: Duration(time.Second)}, granted.Add(2*time.Second + TokenExpiryMargin)},
		{"defaults", Spec{}, granted.Add(DefaultTimeout + DefaultLeaseTTL + TokenExpiryMargin)},
	}
	for _, tc := range cases {
		if got := tc.spec.TokenExpiry(granted); !got.Equal(tc.want) {
			t.Errorf("%s: TokenExpiry = %v, want %v", tc.name, got, tc.want)
		}
	}
}
