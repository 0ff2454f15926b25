package conv

import (
	"errors"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// ErrNoConversion says a message, or a part of it, cannot be written in the dialect asked for: the
// dialect has no place for it (CarryError.What says what), or, for antigravity, no conversion into it
// exists (a message decoded from it and left unchanged is written back as it came).
var ErrNoConversion = errors.New("no conversion to this dialect")

// CarryError refuses to write a conversation in a dialect that cannot carry all of it: it names
// the dialect, the message of the Conversation (Index; -1 when not one message) and what could not
// be carried (What: a field path of the written message when the dialect's own validation refused
// it, Err then being codec's *ValidationError, whose Index counts written messages). Nothing is
// ever dropped silently instead.
type CarryError struct {
	Dialect string
	Index   int
	What    string
	Err     error // ErrNoConversion, or codec's *ValidationError for the result
}

func (e *CarryError) Error() string {
	where := ""
	if e.Index >= 0 {
		where = fmt.Sprintf("message %d of the conversation: ", e.Index)
	}
	var ve *codec.ValidationError
	if e.What != "" && !errors.As(e.Err, &ve) { // a ValidationError names the field itself
		where += e.What + ": "
	}
	return fmt.Sprintf("cannot write as %s: %s%v", e.Dialect, where, e.Err)
}

func (e *CarryError) Unwrap() error { return e.Err }
