package wire

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// An error's message may quote what a client sent (a header's value, a request's field), escaped:
// up to 6 bytes in JSON for each byte sent. A reply is one message, so a message that would make
// it exceed the server's max_payload is cut to fit (docs/protocol.md §7); the rest of the error
// is never cut.

// Cut is e with its message cut so that its JSON encoding is at least excess bytes shorter, and a
// note saying so. Each try keeps the share of what is kept that the room allows at its average
// escaping (exact for a message of one kind of bytes, the usual attack); after a few tries still
// over, it cuts as many bytes more as it is over, which is enough: every byte takes at least one
// in JSON. It cuts between runes, where what is kept encodes as it did in the whole.
func (e *Error) Cut(excess int) *Error {
	msg := e.Message
	note := fmt.Sprintf("... (cut to fit max_payload; %d bytes in all)", len(msg))
	want := jsonLen(msg) - excess - len(note) // what the kept part may take, encoded
	keep, took := len(msg), jsonLen(msg)
	for try := 0; took > want && keep > 0; try++ {
		if try < 3 {
			keep = runeStart(msg, int(int64(max(want, 0))*int64(keep)/int64(took)))
		} else {
			keep = runeStart(msg, max(keep-(took-want), 0))
		}
		took = jsonLen(msg[:keep])
	}
	cut := *e
	cut.Message = msg[:keep] + note
	return &cut
}

// jsonLen is the length of s encoded as a JSON string, quotes included.
func jsonLen(s string) int {
	data, _ := json.Marshal(s) // a string always encodes
	return len(data)
}

// runeStart is i, or the closest start of a rune in s before it.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}
