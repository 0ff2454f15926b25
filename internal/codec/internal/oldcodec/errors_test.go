// The old validator's errors (see doc.go).
package oldcodec

import (
	"errors"
	"fmt"
)

// Sentinel errors; every error from this package is a *ValidationError wrapping one of them.
var (
	ErrMalformed            = errors.New("malformed checkpoint")
	ErrUnknownRole          = errors.New("unknown role")
	ErrUnknownContentType   = errors.New("unknown content type")
	ErrUnknownFormatVersion = errors.New("unknown format version")
	ErrTooLarge             = errors.New("checkpoint too large")
)

// ValidationError says what was wrong and where.
type ValidationError struct {
	Err    error  // one of the sentinels above
	Index  int    // message index in the array; -1 when not inside one message
	Field  string // path inside the message, e.g. "content[2].type"; "" for the whole message
	Offset int64  // byte offset in the payload for syntax and encoding errors; -1 otherwise
	Detail string // what was found, and what was expected
}

func (e *ValidationError) Error() string {
	var where string
	switch {
	case e.Index >= 0 && e.Field != "":
		where = fmt.Sprintf("message %d: %s: ", e.Index, e.Field)
	case e.Index >= 0:
		where = fmt.Sprintf("message %d: ", e.Index)
	case e.Offset >= 0:
		where = fmt.Sprintf("byte %d: ", e.Offset)
	}
	msg := where + e.Err.Error()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *ValidationError) Unwrap() error { return e.Err }

func payloadError(err error, offset int64, format string, args ...any) *ValidationError {
	return &ValidationError{Err: err, Index: -1, Offset: offset, Detail: fmt.Sprintf(format, args...)}
}
