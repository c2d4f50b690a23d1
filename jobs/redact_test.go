package jobs_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

// Redact keeps every URL's scheme and host and hides header values; it
// changes nothing the spec shares with its caller, and says whether it
// hid anything.
func TestRedact(t *testing.T) {
	spec := jobs.Spec{Name: "hook", Shell: "true",
		Notify: []jobs.Notify{
			{On: []string{"failed"}, Webhook: "https://user:pw@hooks.example.com:8443/path/SECRET?key=SECRET#frag"},
			{On: []string{"failed"}, Slack: "https://hooks.slack.com/services/T/B/SECRET"},
			{On: []string{"failed"}, Email: []string{"ops@example.com"}},
			{On: []string{"failed"}, Webhook: "http://plain.example.com"},
		},
		HTTP: &jobs.HTTP{URL: "http://api.example.com/run?token=SECRET", Headers: map[string]string{"X-Key": "SECRET", "X-Empty": ""}},
	}
	before := deepCopy(spec)
	got, hid := jobs.Redact(spec)
	if !hid {
		t.Error("Redact hid nothing, it says")
	}
	for i, want := range []string{"https://hooks.example.com:8443", "", "", "http://plain.example.com"} {
		if got.Notify[i].Webhook != want {
			t.Errorf("notify[%d].webhook = %q, want %q", i, got.Notify[i].Webhook, want)
		}
	}
	if got.Notify[1].Slack != "https://hooks.slack.com" || got.Notify[2].Email[0] != "ops@example.com" {
		t.Errorf("notify = %+v", got.Notify)
	}
	if got.HTTP.URL != "http://api.example.com" || got.HTTP.Headers["X-Key"] != jobs.Hidden || got.HTTP.Headers["X-Empty"] != "" {
		t.Errorf("http = %+v", got.HTTP)
	}
	if !reflect.DeepEqual(spec, before) {
		t.Errorf("Redact changed its argument:\n%+v\nwas\n%+v", spec, before)
	}
	for _, v := range []string{got.Notify[0].Webhook, got.Notify[1].Slack, got.HTTP.URL, got.HTTP.Headers["X-Key"]} {
		if strings.Contains(v, "SECRET") || strings.Contains(v, "pw") {
			t.Errorf("%q shows a secret", v)
		}
	}

	plain := jobs.Spec{Name: "plain", Shell: "true", Notify: []jobs.Notify{{On: []string{"failed"}, Webhook: "https://hooks.example.com"}},
		HTTP: &jobs.HTTP{URL: "https://api.example.com"}}
	if got, hid := jobs.Redact(plain); hid || !reflect.DeepEqual(got, plain) {
		t.Errorf("a spec with nothing to hide: %+v, hid %v", got, hid)
	}
	if got, hid := jobs.Redact(jobs.Spec{Name: "x", HTTP: &jobs.HTTP{URL: "not a url"}}); !hid || got.HTTP.URL != jobs.Hidden {
		t.Errorf("a URL without scheme and host: %q, hid %v", got.HTTP.URL, hid)
	}
}

// deepCopy copies what Redact could reach into.
func deepCopy(s jobs.Spec) jobs.Spec {
	c := s
	c.Notify = append([]jobs.Notify(nil), s.Notify...)
	if s.HTTP != nil {
		h := *s.HTTP
		h.Headers = map[string]string{}
		for k, v := range s.HTTP.Headers {
			h.Headers[k] = v
		}
		c.HTTP = &h
	}
	return c
}
