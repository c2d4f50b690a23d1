package api

import (
	"fmt"
	"net/http"
)

// holdsState refuses, on a worker node (server: false, which applies no
// Raft log), the reads of the replicated state: its copy is empty, and an
// empty list of runs would read as "nothing ran". The answer is 421
// (misdirected) naming the leader's address to ask instead; a page gets
// the same as an error page with that link.
func (s *Server) HoldsState(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, server := s.Cluster.RaftStats(); server {
			next.ServeHTTP(w, r)
			return
		}
		where := "no leader is known yet; ask a server node"
		if addr, err := s.Cluster.LeaderHTTP(); err == nil && addr != "" {
			scheme := "http"
			if s.HTTPS {
				scheme = "https"
			}
			where = fmt.Sprintf("ask a server, such as the leader: %s://%s%s", scheme, addr, r.URL.RequestURI())
		}
		s.Error(w, r, fmt.Errorf("%w: node %s is a worker (server: false) and holds no replicated state (jobs, runs, events); %s", errMisdirected, s.Cluster.ID(), where))
	})
}
