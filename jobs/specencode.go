package jobs

import (
	"slices"
	"strconv"
	"unicode/utf8"
)

// appendSpec appends s encoded as json.Marshal encodes it, byte for byte.
//
// A set's hash, each job's digest and size, and a set sent whole all
// encode every spec: for 100,000 jobs, encoding/json's reflection was most
// of hashing a set the leader does on every apply. The bytes must stay
// json.Marshal's, since hashes and digests are compared across versions:
// TestAppendSpec_AsJSONMarshal compares the two over specs with every
// field set (found by reflection, so a field added to Spec is covered),
// with strings that need escaping.
func appendSpec(b []byte, s *Spec) []byte {
	b = append(b, `{"name":`...)
	b = appendJSONString(b, s.Name)
	if s.Namespace != "" {
		b = appendJSONString(append(b, `,"namespace":`...), s.Namespace)
	}
	b = appendJSONStrings(append(b, `,"schedules":`...), s.Schedules)
	if s.Timezone != "" {
		b = appendJSONString(append(b, `,"timezone":`...), s.Timezone)
	}
	if len(s.Command) > 0 {
		b = appendJSONStrings(append(b, `,"command":`...), s.Command)
	}
	if s.Shell != "" {
		b = appendJSONString(append(b, `,"shell":`...), s.Shell)
	}
	if len(s.Env) > 0 {
		b = appendJSONMap(append(b, `,"env":`...), s.Env)
	}
	if s.Dir != "" {
		b = appendJSONString(append(b, `,"dir":`...), s.Dir)
	}
	if s.Output != "" {
		b = appendJSONString(append(b, `,"output":`...), s.Output)
	}
	b = appendJSONString(append(b, `,"timeout":`...), s.Timeout.String())
	b = appendJSONString(append(b, `,"lease_ttl":`...), s.LeaseTTL.String())
	b = strconv.AppendInt(append(b, `,"retries":`...), int64(s.Retries), 10)
	b = appendJSONString(append(b, `,"backoff":`...), s.Backoff.String())
	b = appendJSONString(append(b, `,"overlap":`...), s.Overlap)
	b = appendJSONString(append(b, `,"misfire":`...), s.Misfire)
	b = appendJSONString(append(b, `,"catchup_window":`...), s.CatchupWindow.String())
	if len(s.Target) > 0 {
		b = appendJSONMap(append(b, `,"target":`...), s.Target)
	}
	b = strconv.AppendInt(append(b, `,"max_output_bytes":`...), s.MaxOutputBytes, 10)
	b = strconv.AppendBool(append(b, `,"paused":`...), s.Paused)
	if s.Jitter != 0 {
		b = appendJSONString(append(b, `,"jitter":`...), s.Jitter.String())
	}
	b = appendJSONString(append(b, `,"dst":{"spring":`...), s.DST.Spring)
	b = append(appendJSONString(append(b, `,"fall":`...), s.DST.Fall), '}')
	if s.History != (History{}) {
		b = append(b, `,"history":{`...)
		comma := false
		if s.History.Runs != 0 {
			b, comma = strconv.AppendInt(append(b, `"runs":`...), int64(s.History.Runs), 10), true
		}
		if s.History.MaxAge != 0 {
			if comma {
				b = append(b, ',')
			}
			b = appendJSONString(append(b, `"max_age":`...), s.History.MaxAge.String())
		}
		b = append(b, '}')
	}
	if len(s.Notify) > 0 {
		b = append(b, `,"notify":[`...)
		for i, n := range s.Notify {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONStrings(append(b, `{"on":`...), n.On)
			if n.Webhook != "" {
				b = appendJSONString(append(b, `,"webhook":`...), n.Webhook)
			}
			if n.Slack != "" {
				b = appendJSONString(append(b, `,"slack":`...), n.Slack)
			}
			if len(n.Email) > 0 {
				b = appendJSONStrings(append(b, `,"email":`...), n.Email)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(s.After) > 0 {
		b = appendJSONStrings(append(b, `,"after":`...), s.After)
	}
	if h := s.HTTP; h != nil {
		b = appendJSONString(append(b, `,"http":{"url":`...), h.URL)
		if h.Method != "" {
			b = appendJSONString(append(b, `,"method":`...), h.Method)
		}
		if len(h.Headers) > 0 {
			b = appendJSONMap(append(b, `,"headers":`...), h.Headers)
		}
		if h.Body != "" {
			b = appendJSONString(append(b, `,"body":`...), h.Body)
		}
		if len(h.ExpectStatus) > 0 {
			b = append(b, `,"expect_status":[`...)
			for i, c := range h.ExpectStatus {
				if i > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendInt(b, int64(c), 10)
			}
			b = append(b, ']')
		}
		if h.CAFile != "" {
			b = appendJSONString(append(b, `,"ca_file":`...), h.CAFile)
		}
		b = append(b, '}')
	}
	if s.Group != "" {
		b = appendJSONString(append(b, `,"group":`...), s.Group)
	}
	if g := s.GroupLimits; g != nil {
		b = appendJSONString(append(b, `,"group_limits":{"name":`...), g.Name)
		if g.Namespace != "" {
			b = appendJSONString(append(b, `,"namespace":`...), g.Namespace)
		}
		b = strconv.AppendInt(append(b, `,"max_running":`...), int64(g.MaxRunning), 10)
		b = append(strconv.AppendInt(append(b, `,"max_waiting":`...), int64(g.MaxWaiting), 10), '}')
	}
	return append(b, '}')
}

// appendJSONStrings appends a list of strings, or null for a nil one.
func appendJSONStrings(b []byte, list []string) []byte {
	if list == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONMap appends a non-empty map of strings, its keys in order.
func appendJSONMap(b []byte, m map[string]string) []byte {
	var buf [16]string
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendJSONString(b, k), ':')
		b = appendJSONString(b, m[k])
	}
	return append(b, '}')
}

// appendJSONString appends s quoted as encoding/json quotes a string with
// HTML escaping (json.Marshal's): <, > and & as \u003c, \u003e and
// \u0026, U+2028 and U+2029 escaped, invalid UTF-8 as \ufffd.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(append(b, s[start:i]...), `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(append(b, s[start:]...), '"')
}
