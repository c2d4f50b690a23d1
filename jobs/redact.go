package jobs

import (
	"maps"
	"net/url"
	"slices"
)

// Hidden stands in a redacted spec (Redact) for a value that may be a
// credential.
const Hidden = "(hidden)"

// Redact returns a copy of s without what may be a credential, for
// readers who do not hold the API token. Every URL in it (a
// notification's webhook or Slack URL, an HTTP job's URL) keeps only its
// scheme and host: a Slack or webhook URL's path is the credential, and a
// query string or user info often holds one. An HTTP job's header values
// become Hidden. It reports whether anything was hidden.
//
// s is not changed, nor anything it shares with the caller (its notify
// list, its HTTP request, its headers): the spec may be the replicated
// state's own.
func Redact(s Spec) (Spec, bool) {
	hid := false
	if len(s.Notify) > 0 {
		list := slices.Clone(s.Notify)
		for i := range list {
			list[i].Webhook = hideURL(list[i].Webhook, &hid)
			list[i].Slack = hideURL(list[i].Slack, &hid)
		}
		s.Notify = list
	}
	if s.HTTP != nil {
		h := *s.HTTP
		h.URL = hideURL(h.URL, &hid)
		if len(h.Headers) > 0 {
			h.Headers = maps.Clone(h.Headers)
			for k, v := range h.Headers {
				if v != "" {
					h.Headers[k], hid = Hidden, true
				}
			}
		}
		s.HTTP = &h
	}
	return s, hid
}

// hideURL returns raw's scheme and host (scheme://host[:port]), or Hidden
// if it has none, setting *hid when that is not all of raw.
func hideURL(raw string, hid *bool) string {
	if raw == "" {
		return ""
	}
	out := Hidden
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.Host != "" {
		out = u.Scheme + "://" + u.Host
	}
	if out != raw {
		*hid = true
	}
	return out
}
