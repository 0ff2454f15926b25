package wire

// PlainSaveResult reads the reply to a single save (docs/protocol.md §4.0) when it is the result
// of a stored save of the plain shape (plain.go), as the daemon writes it; ok false for anything
// else (a refusal, a space, an escape, a fork reference), to be read by encoding/json. The SDK's
// encoding/json decode of that ~1 KB reply cost ~13 µs of a first save's client CPU
// (docs/format.md §8.15u).
func PlainSaveResult(b []byte) (r SaveResult, ok bool) {
	p := plain{b: b}
	return r, p.saveResult(&r) && p.end()
}
