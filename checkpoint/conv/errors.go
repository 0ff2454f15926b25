package conv

import (
	"errors"
	"fmt"
)

// ErrNoConversion says a message cannot be written in the dialect asked for: the model has no
// mapping out to it (today only native is written from the model; a message decoded from a
// dialect and left unchanged is written back to that dialect as it came).
var ErrNoConversion = errors.New("no conversion to this dialect")

// CarryError refuses to write a conversation in a dialect that cannot carry all of it: it names
// the dialect, the message (Index, -1 when the dialect's validation of the result names it in Err)
// and what could not be carried. Nothing is ever dropped silently instead.
type CarryError struct {
	Dialect string
	Index   int
	What    string
	Err     error // ErrNoConversion, or codec's *ValidationError for the result
}

func (e *CarryError) Error() string {
	where := ""
	if e.Index >= 0 {
		where = fmt.Sprintf("message %d: ", e.Index)
	}
	what := ""
	if e.What != "" {
		what = e.What + ": "
	}
	return fmt.Sprintf("cannot write as %s: %s%s%v", e.Dialect, where, what, e.Err)
}

func (e *CarryError) Unwrap() error { return e.Err }
