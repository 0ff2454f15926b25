package checkpoint

import (
	"errors"
	"fmt"
	"time"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Sentinel errors; compare with errors.Is. Every refusal from the daemon is an *Error that matches
// exactly one of them.
var (
	ErrBadRequest    = errors.New("bad request")
	ErrInvalid       = errors.New("invalid conversation")
	ErrNotFound      = errors.New("not found")
	ErrConflict      = errors.New("conflict")
	ErrTooLarge      = errors.New("checkpoint too large")
	ErrUnknownFormat = errors.New("unknown format version")
	ErrUnavailable   = errors.New("checkpointd unavailable")
	ErrInternal      = errors.New("internal error")
	// ErrLeased: another owner holds the session's lease (Error.Owner and Error.Epoch say who).
	ErrLeased = errors.New("session leased by another owner")
	// ErrFenced: the lease epoch the save or renewal carried is no longer current (taken over or
	// released); the *Error names the current owner. A fenced writer must stop writing.
	ErrFenced = errors.New("lease epoch is not current")
	// ErrMoved: the session was migrated to another deployment (Error.MovedTo) and refuses writes.
	ErrMoved = errors.New("session moved")
	// ErrCorrupt means restored bytes did not match the hash recorded when they were saved, here
	// or in the daemon (which then answers code "corrupt").
	ErrCorrupt = errors.New("restored checkpoint does not match its hash")
	// ErrBusy: the daemon is at one of its limits (reads in flight, bytes of saves in progress).
	// Nothing was done; Error.RetryAfter says when to try again.
	ErrBusy = errors.New("checkpointd busy")
	// ErrSaveIDReused: the save id already made a version (Error.Version) of another conversation,
	// so this save stored nothing. It also matches ErrConflict. Sending it again with the same save
	// id never succeeds: save under a new save id (or none: every Save gets a fresh one).
	ErrSaveIDReused = errors.New("save id already used for another conversation")
)

var codeSentinels = map[string]error{
	wire.CodeBadRequest:    ErrBadRequest,
	wire.CodeInvalid:       ErrInvalid,
	wire.CodeNotFound:      ErrNotFound,
	wire.CodeConflict:      ErrConflict,
	wire.CodeTooLarge:      ErrTooLarge,
	wire.CodeUnknownFormat: ErrUnknownFormat,
	wire.CodeUnavailable:   ErrUnavailable,
	wire.CodeInternal:      ErrInternal,
	wire.CodeCorrupt:       ErrCorrupt,
	wire.CodeLeased:        ErrLeased,
	wire.CodeFenced:        ErrFenced,
	wire.CodeMoved:         ErrMoved,
	wire.CodeBusy:          ErrBusy,
	wire.CodeSaveIDReused:  ErrSaveIDReused,
}

// Error is a refusal from checkpointd: a stable Code and what was wrong, and where.
type Error struct {
	Code    string // one of the wire codes: bad_request, invalid, not_found, conflict, ...
	Message string
	Index   int    // index of the offending message, or -1
	Field   string // field path inside that message, e.g. "content[2].type"
	Offset  int64  // byte offset of a syntax error, or -1
	Head    uint64 // for conflicts: the session's current head version
	Owner   string // for leased and fenced: the lease's current owner ("" if released)
	Epoch   uint64 // for leased and fenced: the lease's current epoch
	MovedTo string // for moved: where the session went
	Version uint64 // for save_id_reused: the version the save id made
	// RetryAfter is, for busy, how long the daemon asked the client to wait before trying again.
	RetryAfter time.Duration
	// Cause is the underlying error where there is one (Connect: the NATS client's, such as
	// nats.ErrNoServers or a timeout), for errors.Is and errors.As.
	Cause error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Cause }

// Is matches the sentinel of e's code (save_id_reused: ErrConflict too).
func (e *Error) Is(target error) bool {
	if e.Code == wire.CodeSaveIDReused && target == ErrConflict {
		return true
	}
	s, ok := codeSentinels[e.Code]
	if !ok {
		s = ErrInternal
	}
	return s == target
}

func fromWire(we *wire.Error) *Error {
	e := &Error{Code: we.Code, Message: we.Message, Index: -1, Offset: -1, Field: we.Field}
	if we.Index != nil {
		e.Index = *we.Index
	}
	if we.Offset != nil {
		e.Offset = *we.Offset
	}
	if we.Head != nil {
		e.Head = *we.Head
	}
	if we.Epoch != nil {
		e.Epoch = *we.Epoch
	}
	if we.Version != nil {
		e.Version = *we.Version
	}
	if we.RetryAfterMillis != nil {
		e.RetryAfter = time.Duration(*we.RetryAfterMillis) * time.Millisecond
	}
	e.Owner, e.MovedTo = we.Owner, we.MovedTo
	return e
}

func unavailable(format string, args ...any) error {
	return &Error{Code: wire.CodeUnavailable, Message: fmt.Sprintf(format, args...), Index: -1, Offset: -1}
}
