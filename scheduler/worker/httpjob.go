package worker

import (
	"net/http"
	"time"

	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/executor"
)

// prepareHTTP makes an HTTP job's request ready to send, once the
// attempt's token is established and its lease confirmed and, for a run
// granted ahead, before its fire time: the token signed, the body
// rendered, the CA file read and the target's warm transport chosen all
// happen here, so that at the fire time the worker only sends. The span
// of the request, and so traceparent, starts at the send.
func (w *Worker) prepareHTTP(a Assignment) *executor.PreparedHTTP {
	return w.httpClients.Prepare(w.httpRequest(a))
}

// httpRequest is the request an HTTP job's attempt sends: the job's own
// method, URL, headers and rendered body, plus the fence headers, so the
// service it calls can refuse an older attempt as the store does. If the
// body template does not render, nothing is sent and the attempt fails
// with the template's error (Validate renders it for a sample time, so
// this is rare).
func (w *Worker) httpRequest(a Assignment) executor.HTTPRequest {
	h := a.Spec.HTTP
	hdr := http.Header{"User-Agent": {"fencecron"}}
	for k, v := range h.Headers {
		hdr.Set(k, v)
	}
	if w.TokenText != nil {
		hdr.Set(jobs.HTTPTokenHeader, w.TokenText(a))
	}
	hdr.Set(jobs.HTTPRunIDHeader, a.Run.ID)
	hdr.Set(jobs.HTTPScheduledHeader, a.Run.ScheduledAt.UTC().Format(time.RFC3339))
	body, err := a.Spec.HTTPBody(a.Run.ScheduledAt)
	req := executor.HTTPRequest{
		Method: h.MethodOrDefault(), URL: h.URL, Header: hdr, Body: body,
		Expected: h.Expected, ExpectedText: h.ExpectedText(), CAFile: h.CAFile, TLSConfig: clustertls.HTTPJobClientConfig,
		Timeout: a.Spec.Timeout.D(), MaxOutput: a.Spec.MaxOutputBytes,
	}
	if err != nil {
		req.BodyErr = err
	}
	return req
}
