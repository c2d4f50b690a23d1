package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// errEnvUnset: a ${NAME} whose variable is not set.
var errEnvUnset = errors.New("not set")

// envRef matches one ${NAME} or ${NAME:-default} reference.
var envRef = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expandEnv replaces each ${NAME} in s with the variable's value. "$${"
// stands for a literal "${"; any other "$" is kept as it is. A variable
// that is not set is an error; one set to "" expands to "".
// ${NAME:-default} is default when NAME is not set or empty, as in a
// shell: the example configs move their ports with one variable and still
// run as they are.
func expandEnv(s string, lookup func(string) (string, bool), used map[string]bool) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			m := envRef.FindStringSubmatch(s[i:])
			if m == nil {
				return "", fmt.Errorf("bad variable reference at %q: want ${NAME} (write $${ for a literal ${)", clip(s[i:], 20))
			}
			v, ok := lookup(m[1])
			if m[2] != "" && v == "" {
				v, ok = m[3], true
			}
			if !ok {
				return "", fmt.Errorf("environment variable %s is %w", m[1], errEnvUnset)
			}
			if used != nil {
				used[m[1]] = true
			}
			b.WriteString(v)
			i += len(m[0])
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

// parseSize reads "1048576", "64KiB", "16MiB", "1GB".
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil {
		return 0, err
	}
	if v != 0 && (v*mult/mult != v) {
		return 0, fmt.Errorf("%s: too large", s)
	}
	return v * mult, nil
}
