package wire_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Whatever a message holds and however much must go, Cut gives an error that encodes as JSON at
// least excess bytes shorter (or as short as a message of the note alone), whose message is the
// start of the original, cut where it encodes as it did in the whole, and the note; valid UTF-8 stays valid, and e is not
// changed.
func FuzzErrorCut(f *testing.F) {
	for _, s := range []string{"a", "\x01", `\x01`, "é", "€", "<&>", "\xff", "\xe2\x82", "\xe2\x82a", "a\u2028b", ""} {
		f.Add(strings.Repeat(s, 300), 100)
	}
	f.Add(strings.Repeat("\x01", 200)+strings.Repeat("a", 2000), 500)
	f.Add("\x85&&&&&&&&&&", 100) // starts inside a rune: cut to nothing, where the whole's \ufffd begins
	f.Fuzz(func(t *testing.T, msg string, excess int) {
		e := &wire.Error{Code: wire.CodeBadRequest, Message: msg}
		whole, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if excess <= 0 || excess > len(whole) {
			return // Cut is asked for only when a reply is over, and by less than the reply
		}
		cut := e.Cut(excess)
		if e.Message != msg {
			t.Fatalf("Cut changed its receiver's message")
		}
		data, err := json.Marshal(cut)
		if err != nil {
			t.Fatal(err)
		}
		var back wire.Error
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatalf("%q: the cut error is not JSON: %v", data, err)
		}
		kept, note, ok := strings.Cut(cut.Message, "... (cut to fit max_payload; ")
		if !ok || !strings.HasPrefix(msg, kept) || !strings.HasSuffix(note, " bytes in all)") {
			t.Fatalf("%q: not the start of %q and the note", cut.Message, msg)
		}
		keptJSON, _ := json.Marshal(kept)
		msgJSON, _ := json.Marshal(msg)
		if !strings.HasPrefix(string(msgJSON), string(keptJSON[:len(keptJSON)-1])) {
			t.Fatalf("%q: what is kept does not encode as it did in %q (cut inside a rune)", cut.Message, msg)
		}
		if utf8.ValidString(msg) && !utf8.ValidString(cut.Message) {
			t.Fatalf("%q: valid UTF-8 cut into invalid", cut.Message)
		}
		bare, _ := json.Marshal(&wire.Error{Code: e.Code, Message: strings.TrimPrefix(cut.Message, kept)})
		if len(data) > max(len(whole)-excess, len(bare)) {
			t.Fatalf("cut by %d of %d bytes: %d bytes left, more than %d", excess, len(whole), len(data), len(whole)-excess)
		}
	})
}
