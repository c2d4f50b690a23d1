package fencedstore_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
)

// ledger is a downstream service an HTTP job calls: it fences its own
// writes as the store does, keeping the greatest token it has accepted
// and refusing any older one.
type ledger struct {
	signer *fencedstore.Signer
	mu     sync.Mutex
	// greatest is the newest token accepted; a real service keeps it
	// per resource, in the same transaction as the write it guards.
	greatest fencedstore.Token
}

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st, err := l.signer.Verify(r.Header.Get("Fencecron-Token"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized) // forged, altered, or no token
		return
	}
	if time.Now().After(st.Expires) {
		http.Error(w, "token expired", http.StatusUnauthorized)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st.Token.Less(l.greatest) {
		// An older attempt woke up after a newer one started: refuse it.
		http.Error(w, fmt.Sprintf("stale token %s: %s already wrote", st.Token, l.greatest), http.StatusConflict)
		return
	}
	l.greatest = st.Token
	fmt.Fprintf(w, "accepted run %s with token %s", r.Header.Get("Fencecron-Run-Id"), st.Token)
}

// A downstream Go service verifies the Fencecron-Token an HTTP job sends
// (its signature, with a Signer made from the cluster secret) and refuses
// a token older than one it has accepted.
func ExampleSigner_Verify_downstream() {
	secret := []byte("an example cluster secret, 32+ bytes long: 0f9e8d7c6b5a")
	signer, err := fencedstore.NewSigner(secret)
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(&ledger{signer: signer})
	defer srv.Close()

	// What the workers send: attempts 1 (token 3.10) and 2 (token 4.15).
	sign := func(epoch, seq uint64, attempt string) string {
		text, err := signer.Sign(fencedstore.SignedToken{
			Token: fencedstore.Token{Epoch: epoch, Seq: seq}, Attempt: attempt,
			Scope: fencedstore.Scope{Job: "ping", Prefix: "pings/"}, Expires: time.Now().Add(time.Hour),
		})
		if err != nil {
			panic(err)
		}
		return text
	}
	call := func(token string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		req.Header.Set("Fencecron-Token", token)
		req.Header.Set("Fencecron-Run-Id", "ping@20260701T000000Z")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	call(sign(4, 15, "ping@20260701T000000Z.2")) // the newer attempt
	call(sign(3, 10, "ping@20260701T000000Z.1")) // the older one, late
	call("v2.999999.1.4102444800.eA.eA~eA.Zm9yZ2Vk")

	// A token that does not verify wraps ErrBadToken.
	_, err = signer.Verify("v2.999999.1.4102444800.eA.eA~eA.Zm9yZ2Vk")
	fmt.Println(errors.Is(err, fencedstore.ErrBadToken))
	// Output:
	// 200 OK
	// 409 Conflict
	// 401 Unauthorized
	// true
}
