// Package logstore is engine.Log over JetStream: every session a subject of the stream CP_LOG,
// appended with a compare-and-swap on its last sequence, the namespaces' session lists and the
// values on subjects of the same stream (docs/format.md §8.2). It is where the engine's storage
// meets NATS, and it knows nothing of what an entry says (internal/engine decides that). It runs
// engine/logtest, the conformance suite internal/engine/memlog also passes, and its tests hold the
// engine's benchmarks against raw JetStream on the same bytes.
package logstore
