package web

import (
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
)

// errPanic answers a request whose handler panicked. The client learns
// only that the node logged it; the panic's text and stack go to the log.
var errPanic = errors.New("internal error: the node logged its cause")

// recoverPanics turns a handler's panic into an ERROR line with its stack
// and a 500 for the client. Without it net/http would log the panic to the
// server's ErrorLog, which is at debug level (strangers' failed TLS
// handshakes go there), and close the connection: the client would get an
// empty answer and the operator no trace. http.ErrAbortHandler, the
// deliberate way to abort a response, is passed on.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.Logger.Error("request handler panicked", "method", r.Method, "path", r.URL.Path, "client", r.RemoteAddr,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			// If the handler had begun its answer, this status is
			// superfluous and net/http drops it: the client sees a cut
			// answer.
			s.api.Error(w, r, errPanic)
		}()
		next.ServeHTTP(w, r)
	})
}
