// Package worker runs what the leader grants on this node: it establishes
// an attempt's fence token at the store before anything starts, starts
// the process or HTTP request only while its lease holds (the lease
// client, leaseclient.go), publishes the output under that token, and
// reports the end to the leader. A worker that loses its lease stops the
// work and writes nothing; one that was paused finds, on waking, a store
// that refuses its token anyway.
//
// The worker never decides anything the cluster must agree on: it asks
// the leader (Leader) and obeys what the replicated state says.
package worker
