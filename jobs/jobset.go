package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// HashSpecs returns a stable hash of a job set: the same jobs, in any
// order, hash the same. Nodes compare it to find a config that drifted
// from the applied set.
func HashSpecs(specs []Spec) string {
	sorted := slices.Clone(specs)
	slices.SortFunc(sorted, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.Marshal(sorted) // map keys are sorted by encoding/json
	if err != nil {
		panic(fmt.Sprintf("hash job set: %v", err)) // Specs are plain data
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// CheckSet checks a job set as a whole before it is replicated: every
// spec valid against l (Spec.Validate) and names unique. It returns every
// problem, wrapping ErrInvalidConfig.
func CheckSet(specs []Spec, l Limits) error {
	var problems []string
	seen := map[string]bool{}
	for i, s := range specs {
		name := s.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		} else if seen[name] {
			problems = append(problems, fmt.Sprintf("job %s: defined twice", name))
		}
		seen[name] = true
		if err := s.Validate(l); err != nil {
			problems = append(problems, fmt.Sprintf("job %s: %v", name, err))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}
