// Package examples ships the example config files inside the binary, so
// `fencecron dev` needs nothing on disk.
package examples

import _ "embed"

// Dev is deploy/examples/dev.yaml: the jobs `fencecron dev` runs.
//
//go:embed dev.yaml
var Dev []byte
