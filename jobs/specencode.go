package jobs

import (
	"slices"
	"strconv"
	"unicode/utf8"
)

// AppendSpec appends s encoded as json.Marshal encodes it, byte for byte.
//
// A set's hash, each job's digest and size, and a set sent whole all
// encode every spec: for 100,000 jobs, encoding/json's reflection was most
// of hashing a set the leader does on every apply. The bytes must stay
// json.Marshal's, since hashes and digests are compared across versions:
// TestAppendSpec_AsJSONMarshal compares the two over specs with every
// field set (found by reflection, so a field added to Spec is covered),
// with strings that need escaping.
func AppendSpec(b []byte, s *Spec) []byte {
	b = append(b, `{"name":`...)
	b = AppendJSONString(b, s.Name)
	b = appendOptString(b, `,"namespace":`, s.Namespace)
	b = appendJSONStrings(append(b, `,"schedules":`...), s.Schedules)
	b = appendOptString(b, `,"timezone":`, s.Timezone)
	b = appendOptStrings(b, `,"command":`, s.Command)
	b = appendOptString(b, `,"shell":`, s.Shell)
	b = appendOptMap(b, `,"env":`, s.Env)
	b = appendOptString(b, `,"dir":`, s.Dir)
	b = appendOptString(b, `,"output":`, s.Output)
	b = AppendJSONString(append(b, `,"timeout":`...), s.Timeout.String())
	b = AppendJSONString(append(b, `,"lease_ttl":`...), s.LeaseTTL.String())
	b = strconv.AppendInt(append(b, `,"retries":`...), int64(s.Retries), 10)
	b = AppendJSONString(append(b, `,"backoff":`...), s.Backoff.String())
	b = AppendJSONString(append(b, `,"overlap":`...), s.Overlap)
	b = AppendJSONString(append(b, `,"misfire":`...), s.Misfire)
	b = AppendJSONString(append(b, `,"catchup_window":`...), s.CatchupWindow.String())
	b = appendOptMap(b, `,"target":`, s.Target)
	b = strconv.AppendInt(append(b, `,"max_output_bytes":`...), s.MaxOutputBytes, 10)
	b = strconv.AppendBool(append(b, `,"paused":`...), s.Paused)
	if s.Jitter != 0 {
		b = AppendJSONString(append(b, `,"jitter":`...), s.Jitter.String())
	}
	b = AppendJSONString(append(b, `,"dst":{"spring":`...), s.DST.Spring)
	b = append(AppendJSONString(append(b, `,"fall":`...), s.DST.Fall), '}')
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
			b = AppendJSONString(append(b, `"max_age":`...), s.History.MaxAge.String())
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
			b = appendOptString(b, `,"webhook":`, n.Webhook)
			b = appendOptString(b, `,"slack":`, n.Slack)
			b = appendOptStrings(b, `,"email":`, n.Email)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendOptStrings(b, `,"after":`, s.After)
	if h := s.HTTP; h != nil {
		b = AppendJSONString(append(b, `,"http":{"url":`...), h.URL)
		b = appendOptString(b, `,"method":`, h.Method)
		b = appendOptMap(b, `,"headers":`, h.Headers)
		b = appendOptString(b, `,"body":`, h.Body)
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
		b = appendOptString(b, `,"ca_file":`, h.CAFile)
		b = append(b, '}')
	}
	b = appendOptString(b, `,"group":`, s.Group)
	if g := s.GroupLimits; g != nil {
		b = AppendJSONString(append(b, `,"group_limits":{"name":`...), g.Name)
		b = appendOptString(b, `,"namespace":`, g.Namespace)
		b = strconv.AppendInt(append(b, `,"max_running":`...), int64(g.MaxRunning), 10)
		b = append(strconv.AppendInt(append(b, `,"max_waiting":`...), int64(g.MaxWaiting), 10), '}')
	}
	return append(b, '}')
}

// appendOptString appends key and s, unless s is empty (omitempty).
func appendOptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return AppendJSONString(append(b, key...), s)
}

// appendOptStrings appends key and list, unless list is empty
// (omitempty).
func appendOptStrings(b []byte, key string, list []string) []byte {
	if len(list) == 0 {
		return b
	}
	return appendJSONStrings(append(b, key...), list)
}

// appendOptMap appends key and m, unless m is empty (omitempty).
func appendOptMap(b []byte, key string, m map[string]string) []byte {
	if len(m) == 0 {
		return b
	}
	return appendJSONMap(append(b, key...), m)
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
		b = AppendJSONString(b, s)
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
		b = append(AppendJSONString(b, k), ':')
		b = AppendJSONString(b, m[k])
	}
	return append(b, '}')
}

// AppendJSONString appends s quoted as encoding/json quotes a string with
// HTML escaping (json.Marshal's): <, > and & as \u003c, \u003e and
// \u0026, U+2028 and U+2029 escaped, invalid UTF-8 as \ufffd.
func AppendJSONString(b []byte, s string) []byte {
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
