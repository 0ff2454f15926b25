package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// Views of a conversation. Full history is kept forever; a view selects what a model should see.
const (
	ViewFull    = "full"    // every message (the default)
	ViewRequest = "request" // from the last compaction marker on, the marker included
)

// ErrBadView refuses an unknown view or a bad message limit.
var ErrBadView = errors.New("bad view")

// View selects messages of a conversation.
type View struct {
	Kind string // ViewFull or ViewRequest
	// MaxMessages, when positive, keeps the most recent messages: MaxMessages rounded down to even,
	// then moved forward past any tool results at the start, so the view never begins with a tool
	// result whose call it cut off.
	MaxMessages int
}

// Check refuses a view this code does not know.
func (v View) Check() error {
	switch {
	case v.Kind != "" && v.Kind != ViewFull && v.Kind != ViewRequest:
		return fmt.Errorf("%w: %q (want full or request)", ErrBadView, v.Kind)
	case v.MaxMessages < 0:
		return fmt.Errorf("%w: max messages %d is negative", ErrBadView, v.MaxMessages)
	}
	return nil
}

// IsFull reports whether the view is the whole conversation.
func (v View) IsFull() bool { return (v.Kind == "" || v.Kind == ViewFull) && v.MaxMessages == 0 }

// Apply returns the messages of msgs the view selects (a sub-slice, never a copy or an edit).
func (v View) Apply(msgs [][]byte) [][]byte {
	if v.Kind == ViewRequest {
		for i := len(msgs) - 1; i >= 0; i-- {
			if isCompaction(msgs[i]) {
				msgs = msgs[i:]
				break
			}
		}
	}
	if v.MaxMessages > 0 {
		n := v.MaxMessages - v.MaxMessages%2
		start := max(len(msgs)-n, 0)
		for start < len(msgs) && codec.MessageRole(msgs[start]) == codec.RoleToolResult {
			start++
		}
		msgs = msgs[start:]
	}
	return msgs
}

// isCompaction reports whether msg is an extension message of kind compaction. Removing such a
// marker (saving a version without it) rolls the compaction back: the request view then reaches
// further back, to the previous marker or the start.
func isCompaction(msg []byte) bool {
	if !bytes.Contains(msg, []byte(`"compaction"`)) { // cheap test first: most messages are not
		return false
	}
	var m struct {
		Role string `json:"role"`
		Kind string `json:"kind"`
	}
	return json.Unmarshal(msg, &m) == nil && m.Role == codec.RoleExtension && m.Kind == "compaction"
}

// Encode returns msgs as a JSON array.
func Encode(msgs [][]byte) []byte {
	out := make([]byte, 0, joinedLen(msgs)+2)
	out = append(out, '[')
	out = append(out, join(msgs)...)
	return append(out, ']')
}
