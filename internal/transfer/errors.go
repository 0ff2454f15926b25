package transfer

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// errBadRequest marks a request that cannot be served as sent (a bad header, a missing field).
var errBadRequest = errors.New("bad request")

// toWireError turns an error into the refusal a client sees: a stable code plus what was wrong and
// where.
func toWireError(err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	e := &wire.Error{Code: wire.CodeInternal, Message: err.Error()}
	var ve *codec.ValidationError
	var ce *snapshot.ConflictError
	var le *snapshot.LeaseError
	var me *snapshot.MovedError
	switch {
	case errors.As(err, &ve):
		e.Code = wire.CodeInvalid
		switch {
		case errors.Is(err, codec.ErrTooLarge):
			e.Code = wire.CodeTooLarge
		case errors.Is(err, codec.ErrUnknownFormatVersion):
			e.Code = wire.CodeUnknownFormat
		}
		if ve.Index >= 0 {
			e.Index = &ve.Index
		}
		e.Field = ve.Field
		if ve.Offset >= 0 {
			e.Offset = &ve.Offset
		}
	case errors.As(err, &ce):
		e.Code = wire.CodeConflict
		e.Head = &ce.Head
	case errors.As(err, &le):
		e.Code, e.Owner = le.Code, le.Lease.Owner
		e.Epoch = &le.Lease.Epoch
	case errors.As(err, &me):
		e.Code, e.MovedTo = wire.CodeMoved, me.Moved.To
	case errors.Is(err, snapshot.ErrHashMismatch):
		e.Code = wire.CodeInvalid
	case errors.Is(err, snapshot.ErrCorrupt):
		e.Code = wire.CodeCorrupt
	case errors.Is(err, snapshot.ErrNotFound):
		e.Code = wire.CodeNotFound
	case errors.Is(err, wire.ErrInvalidID), errors.Is(err, errBadRequest), errors.Is(err, snapshot.ErrBadRequest):
		e.Code = wire.CodeBadRequest
	case isTransient(err):
		e.Code = wire.CodeUnavailable
	}
	return e
}

// isTransient reports errors worth retrying: storage or the network was briefly unavailable.
func isTransient(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, errUnavailable) || errors.Is(err, snapshot.ErrBusy) ||
		errors.Is(err, snapshot.ErrTooSlow)
}

// errUnavailable marks a condition that will pass: JetStream has no leader, ingest is catching up.
var errUnavailable = errors.New("temporarily unavailable")
