package engine

import (
	"errors"
	"fmt"
	"slices"

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
	// Dialect is the conversation's shape ("" is native): it says which messages are compaction
	// markers, tool results and instructions (codec.Classify).
	Dialect string
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

// Apply returns the messages of msgs the view selects. The model's instructions at the start of
// the conversation (the system messages of dialects that keep them in line) stay in every view,
// in front: what is cut is the history after them. Apply returns a sub-slice of msgs, or a new
// slice of the same messages when the instructions are put back in front; never an edited message.
func (v View) Apply(msgs [][]byte) [][]byte {
	if v.IsFull() {
		return msgs
	}
	system := 0
	for system < len(msgs) && codec.Classify(v.Dialect, msgs[system]) == codec.ClassSystem {
		system++
	}
	head, rest := msgs[:system], msgs[system:]
	if v.Kind == ViewRequest {
		for i := len(rest) - 1; i >= 0; i-- {
			if codec.IsCompaction(v.Dialect, rest[i]) {
				rest = rest[i:]
				break
			}
		}
	}
	if v.MaxMessages > 0 {
		n := v.MaxMessages - v.MaxMessages%2
		start := max(len(rest)-n, 0)
		for start < len(rest) && codec.Classify(v.Dialect, rest[start]) == codec.ClassToolResult {
			start++
		}
		rest = rest[start:]
	}
	switch {
	case len(head) == 0:
		return rest
	case len(rest) == len(msgs)-system:
		return msgs // nothing cut between the instructions and the rest
	}
	return append(slices.Clip(head), rest...)
}

// Encode returns msgs as a JSON array.
func Encode(msgs [][]byte) []byte {
	n := 2 + max(len(msgs)-1, 0)
	for _, m := range msgs {
		n += len(m)
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, m := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return append(out, ']')
}
