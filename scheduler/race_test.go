//go:build race

package scheduler

// raceEnabled says the tests run under the race detector.
const raceEnabled = true
