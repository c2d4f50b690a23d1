package api

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/iotest"
)

// A body is read whole and as sent, whether the request says its size
// or not, and in whatever pieces it arrives.
func TestReadBody_Whole(t *testing.T) {
	for _, n := range []int{0, 1, 64<<10 - 1, 64 << 10, 64<<10 + 1, 5<<20 + 3} {
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i * 7)
		}
		for _, size := range []int64{-1, int64(n)} {
			got, err := readBody(iotest.HalfReader(bytes.NewReader(want)), size, 64<<20)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%d bytes, size %d: got %d bytes, %v", n, size, len(got), err)
			}
		}
	}
}

// A body past its limit fails with http.MaxBytesError, which the
// handler turns into a 413 that says how large a set may be.
func TestReadBody_PastItsLimit(t *testing.T) {
	body := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(make([]byte, 300<<10))), 200<<10)
	_, err := readBody(body, -1, 200<<10)
	var tooLarge *http.MaxBytesError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("err %v, want an http.MaxBytesError", err)
	}
}
