package main

import (
	"log/slog"
	"os"
	"runtime"
)

// minProcs is the fewest Ps (GOMAXPROCS) a node runs with.
//
// Go starts a job's process with a raw vfork: the thread that forks keeps
// its P, and with it that P's run queue and timers, until the child has
// called exec. On two cores a node has two Ps, and one starting hundreds
// of processes a second had one of them frozen much of the time: its Raft
// heartbeats and replies waited behind the forks. Measured with fencebench
// at 500 fires/s, three servers on two cores: the leader stepped down
// twice in 30 s and p99 lateness was 1,263 ms; with four Ps, no election
// and 568 ms. Below 500 fires/s it changes nothing measurable.
const minProcs = 4

// procsFor is the GOMAXPROCS a node should run with, given the runtime's
// and the GOMAXPROCS variable: an operator's choice stands.
func procsFor(current int, env string) int {
	if env != "" || current >= minProcs {
		return current
	}
	return minProcs
}

// raiseProcs applies procsFor.
func raiseProcs(log *slog.Logger) {
	cur := runtime.GOMAXPROCS(0)
	if n := procsFor(cur, os.Getenv("GOMAXPROCS")); n != cur {
		runtime.GOMAXPROCS(n)
		log.Info("GOMAXPROCS raised so that starting processes does not hold up Raft", "from", cur, "to", n)
	}
}
