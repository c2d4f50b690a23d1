package api

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// What the reading side of the API gives to whom. Every port may be
// reachable by strangers, and reading needs no token, so:
//
//   - A job's secrets (the URLs of its notifications and of its HTTP
//     request, its request's header values: jobs.Redact) are shown only
//     to whoever may change the job set (auth.Guard.SeesSecrets); everyone else gets
//     scheme and host, and "(hidden)".
//   - The whole set (GET /api/v1/jobset, what `apply -dry-run` diffs) is
//     for them only too, and at most maxJobSetExports are written at
//     once; GET /api/v1/jobs pages through the set for anyone.
//   - Large answers are written as they are encoded, a job at a time,
//     never built whole: a node holding 100,000 jobs answers an export
//     with a few KiB of buffers, not a copy of the set.

// maxJobSetExports bounds the exports of the whole job set a node writes
// at once. One costs a core about 0.4 s per 100,000 jobs and only
// buffers of memory, but the garbage it makes grows the heap to the
// collector's goal; more are answered 503 with Retry-After, so that
// exports never crowd out the node's own work on a small machine.
const maxJobSetExports = 4

// exportRetryAfter is the Retry-After of an export refused for now.
const exportRetryAfter = time.Second

// exportRefused is why a request that does not see secrets may not
// export the job set.
func (s *Server) exportRefused() error {
	if !s.Guard.Required() {
		return fmt.Errorf("%w: the whole job set holds the jobs' secrets, and this node has no API token (api.token), so only clients on its own host may export it; "+
			"set api.token on the node and send it as \"Authorization: Bearer TOKEN\" (fencecron -token or FENCECRON_API_TOKEN), or page through GET /api/v1/jobs", errForbidden)
	}
	return fmt.Errorf("%w: the whole job set holds the jobs' secrets and needs the API token: send \"Authorization: Bearer TOKEN\" (fencecron -token or FENCECRON_API_TOKEN), "+
		"or log in at /login; GET /api/v1/jobs pages through the set without it", errUnauthorized)
}

// handleJobSet exports the job set whole to a reader who sees secrets;
// ?applied=true exports it as applied (paused as the file said) with the
// jobs an operator paused beside it: what apply -dry-run compares a file
// with.
func (s *Server) handleJobSet(w http.ResponseWriter, r *http.Request) {
	scope, limited := exportScope(r)
	switch ok, err := s.Guard.SeesSecrets(r); {
	case err != nil:
		s.Error(w, r, err)
		return
	case !ok && len(scope) == 0:
		s.Error(w, r, s.exportRefused())
		return
	}
	if n := s.exports.Add(1); n > maxJobSetExports {
		s.exports.Add(-1)
		s.Metrics.ExportsRefused.Add(1)
		s.Error(w, r, &retryError{after: exportRetryAfter,
			err: fmt.Errorf("%w: %d job set exports are being written, the most this node writes at once; try again in a moment", errUnavailable, n-1)})
		return
	}
	defer s.exports.Add(-1)
	set := s.State.ExportJobSet()
	if limited {
		set = scopedExport(set, scope)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := writeJobSet(w, set, r.URL.Query().Get("applied") == "true", scope); err != nil {
		// The status is sent: the client sees a cut answer.
		s.Logger.Debug("job set export ended early", "remote", r.RemoteAddr, "err", err)
	}
}

// writeJobSet writes set as wire.JobSet, one spec at a time: it holds
// one spec's encoding and a buffer, whatever the set's size. Without
// applied, each spec shows paused if an operator paused it too, and the
// operator's list is left out. A scope is written as the export's
// namespaces.
func writeJobSet(w io.Writer, set fsm.JobSetExport, applied bool, scope []string) error {
	info, err := json.Marshal(set.Info)
	if err != nil {
		return err
	}
	var byOperator map[string]bool
	if !applied && len(set.OperatorPaused) > 0 {
		byOperator = make(map[string]bool, len(set.OperatorPaused))
		for _, n := range set.OperatorPaused {
			byOperator[n] = true
		}
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(`{"info":`)
	bw.Write(info)
	bw.WriteString(`,"jobs":[`)
	// One spec per line: a copy of its fields, whose Paused may change;
	// what it shares with the replicated state is only read.
	enc := json.NewEncoder(bw)
	for i := range set.Jobs {
		spec := *set.Jobs[i]
		spec.Paused = spec.Paused || byOperator[spec.Name]
		if i > 0 {
			bw.WriteByte(',')
		}
		if err := enc.Encode(&spec); err != nil {
			return err
		}
	}
	bw.WriteByte(']')
	if len(scope) > 0 {
		ns, err := json.Marshal(scope)
		if err != nil {
			return err
		}
		bw.WriteString(`,"namespaces":`)
		bw.Write(ns)
	}
	if applied && len(set.OperatorPaused) > 0 {
		paused, err := json.Marshal(set.OperatorPaused)
		if err != nil {
			return err
		}
		bw.WriteString(`,"operator_paused":`)
		bw.Write(paused)
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

// writeJobList writes l as WriteJSON writes it (indented), one job at a
// time: a page of large specs is never encoded whole in memory.
func writeJobList(w http.ResponseWriter, l wire.JobList) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString("{\n  \"jobs\": [")
	for i := range l.Jobs {
		b, err := json.MarshalIndent(&l.Jobs[i], "    ", "  ")
		if err != nil {
			return // plain data: not reached
		}
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString("\n    ")
		bw.Write(b)
	}
	if len(l.Jobs) > 0 {
		bw.WriteString("\n  ")
	}
	bw.WriteString("],\n")
	if l.Next != "" {
		next, _ := json.Marshal(l.Next)
		fmt.Fprintf(bw, "  \"next\": %s,\n", next)
	}
	fmt.Fprintf(bw, "  \"matched\": %d,\n  \"total\": %d\n}\n", l.Matched, l.Total)
	bw.Flush()
}
