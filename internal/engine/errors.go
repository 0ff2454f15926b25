package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// The engine's errors. Each is a sentinel callers test with errors.Is; those that carry details
// are typed (ConflictError, LeaseError, MovedError) and match their sentinel. The edge maps them
// to the protocol's error codes in one function; nothing here knows those codes. ErrNotFound and
// ErrTooLarge (log.go) are shared with the Log: a missing session, version or value is not found.
var (
	// ErrVersionConflict: a save expected another head version (*ConflictError).
	ErrVersionConflict = errors.New("conflict with the head version")
	// ErrLeased: another owner holds the session's lease (*LeaseError).
	ErrLeased = errors.New("session leased by another owner")
	// ErrFenced: the writer's lease epoch is not the current one (*LeaseError).
	ErrFenced = errors.New("lease epoch is not current")
	// ErrMoved: the session was sealed (migrated away) and refuses writes (*MovedError).
	ErrMoved = errors.New("session moved")
	// ErrBadRequest: a request that contradicts itself or the session's rules.
	ErrBadRequest = errors.New("bad request")
	// ErrCorrupt: stored bytes that are not what their entry, record or hash say.
	ErrCorrupt = errors.New("stored checkpoint is corrupt")
	// ErrUnknownFormat: an entry written in a format this code does not know (a newer daemon).
	ErrUnknownFormat = errors.New("unknown entry format")
	// ErrHashMismatch: an import whose conversation does not have the hash it declared.
	ErrHashMismatch = errors.New("conversation does not match the declared hash")
	// ErrBusy: other writers kept moving the session's head; try again.
	ErrBusy = errors.New("session busy")
	// ErrDialectMismatch: a save in another dialect than the session's (also ErrBadRequest).
	ErrDialectMismatch = fmt.Errorf("%w: dialect mismatch", ErrBadRequest)
	// ErrConfig: the Engine's Config is not valid (Config.Validate); every write is refused.
	ErrConfig = errors.New("invalid engine configuration")
	// ErrVersionLimit: the session is at MaxVersion (also ErrBadRequest).
	ErrVersionLimit = fmt.Errorf("%w: no version number left", ErrBadRequest)
)

// IsRefusal tells the engine refusing a request by the session's rules or the codec's (an invalid
// conversation, a stale version, a lease, a seal, a bad request, a reused save id) from a storage
// failure: the session is as the engine last saw it (its cached state is still right), and the
// same request would be refused again. The daemon's split of a save's result from trouble it
// retries (edge.IsStorageRefusal) builds on it, so a new refusal is named here only.
func IsRefusal(err error) bool {
	var ve *codec.ValidationError
	return errors.As(err, &ve) || errors.Is(err, ErrVersionConflict) || errors.Is(err, ErrBadRequest) ||
		errors.Is(err, ErrLeased) || errors.Is(err, ErrFenced) || errors.Is(err, ErrMoved) || errors.Is(err, ErrHashMismatch) ||
		errors.Is(err, ErrSaveIDReused)
}

// ConflictError refuses a save whose expected version is not the session's head.
type ConflictError struct {
	Key      Key
	Expected uint64
	Head     uint64
	Detail   string // replaces the usual message when set
}

func (e *ConflictError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("session %s: %s", e.Key, e.Detail)
	}
	return fmt.Sprintf("session %s: expected to extend version %d, but the head is version %d", e.Key, e.Expected, e.Head)
}

// Is makes errors.Is(err, ErrVersionConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrVersionConflict }

// LeaseError refuses a lease operation or a save because of the session's lease. Fenced tells
// ErrFenced (a stale or released epoch) from ErrLeased (held by another owner).
type LeaseError struct {
	Fenced bool
	Key    Key
	Lease  Lease // the current lease
	Detail string
}

func (e *LeaseError) Error() string { return fmt.Sprintf("session %s: %s", e.Key, e.Detail) }

// Is makes errors.Is match ErrFenced or ErrLeased.
func (e *LeaseError) Is(target error) bool {
	return target == ErrFenced && e.Fenced || target == ErrLeased && !e.Fenced
}

// MovedError refuses a write to a session that was migrated away.
type MovedError struct {
	Key   Key
	Moved Moved
}

func (e *MovedError) Error() string {
	return fmt.Sprintf("session %s moved to %s at %s; write there", e.Key, e.Moved.To, e.Moved.At.Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrMoved) true.
func (e *MovedError) Is(target error) bool { return target == ErrMoved }
