package transfer

import (
	"errors"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The edge between the protocol (internal/wire) and the storage domain (internal/engine): the one
// place where the engine's keys, records, leases and errors become the protocol's. The engine knows
// nothing of wire, so a protocol change is not a storage change.

// keyOf is the engine's key of a protocol key.
func keyOf(k wire.Key) engine.Key {
	return engine.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
}

// wireKey is the protocol's key of an engine key.
func wireKey(k engine.Key) wire.Key {
	return wire.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
}

// versionOf is the protocol's version record of an engine record. Gen has no meaning on the log
// engine (a version's messages are wherever its log's entries are) and is always 0
// (docs/protocol.md §6).
func versionOf(r engine.Record) wire.Version {
	v := wire.Version{
		Format: wire.VersionFormat, Key: wireKey(r.Key), Version: r.Version, Parent: r.Parent, Hash: r.Hash,
		SaveID: r.SaveID, Writer: r.Writer, Reason: r.Reason, Created: r.Created, RawBytes: r.RawBytes,
		StoredBytes: r.StoredBytes, Dialect: r.Dialect,
		Counts: wire.Counts{Messages: r.Counts.Messages, User: r.Counts.User, Assistant: r.Counts.Assistant,
			ToolResult: r.Counts.ToolResult, Extension: r.Counts.Extension, ToolCalls: r.Counts.ToolCalls, System: r.Counts.System},
	}
	if f := r.ForkOf; f != nil {
		v.ForkOf = &wire.ForkRef{Key: wireKey(f.Key), Version: f.Version}
	}
	if o := r.Origin; o != nil {
		v.Origin = &wire.Origin{Via: o.Via, Source: o.Source, At: o.At}
	}
	return v
}

// forkRefOf and originOf carry a save's fork reference and import origin to the engine.
func forkRefOf(f *wire.ForkRef) *engine.ForkRef {
	if f == nil {
		return nil
	}
	return &engine.ForkRef{Key: keyOf(f.Key), Version: f.Version}
}

func originOf(o wire.Origin) engine.Origin {
	return engine.Origin{Via: o.Via, Source: o.Source, At: o.At}
}

// leaseOf is the protocol's lease of a session's lease state.
func leaseOf(key wire.Key, ls engine.LeaseState) wire.Lease {
	return wire.Lease{Key: key, Epoch: ls.Lease.Epoch, Owner: ls.Lease.Owner, Acquired: ls.Lease.Acquired,
		Expires: ls.Lease.Expires, Head: ls.Head}
}

// sessionHeadOf is a session as a listing shows it.
func sessionHeadOf(h engine.SessionHead) wire.SessionHead {
	out := wire.SessionHead{Version: versionOf(h.Record)}
	out.Key = wireKey(h.Key)
	if h.Lease != nil {
		l := wire.Lease{Key: out.Key, Epoch: h.Lease.Epoch, Owner: h.Lease.Owner, Acquired: h.Lease.Acquired,
			Expires: h.Lease.Expires, Head: h.Record.Version}
		out.Lease = &l
	}
	if h.Moved != nil {
		out.Moved = &wire.Moved{To: h.Moved.To, At: h.Moved.At}
	}
	return out
}

// toWireError turns an error into the refusal a client sees: a stable code plus what was wrong and
// where. It is the one mapping of the engine's errors (and the codec's) to the protocol's codes.
func toWireError(err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	e := &wire.Error{Code: wire.CodeInternal, Message: err.Error()}
	var ve *codec.ValidationError
	var ce *engine.ConflictError
	var le *engine.LeaseError
	var me *engine.MovedError
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
		e.Code, e.Owner = wire.CodeLeased, le.Lease.Owner
		if le.Fenced {
			e.Code = wire.CodeFenced
		}
		e.Epoch = &le.Lease.Epoch
	case errors.As(err, &me):
		e.Code, e.MovedTo = wire.CodeMoved, me.Moved.To
	case errors.Is(err, engine.ErrHashMismatch):
		e.Code = wire.CodeInvalid
	case errors.Is(err, engine.ErrCorrupt):
		e.Code = wire.CodeCorrupt
	case errors.Is(err, engine.ErrUnknownFormat):
		e.Code = wire.CodeUnknownFormat
	case errors.Is(err, engine.ErrNotFound):
		e.Code = wire.CodeNotFound
	case errors.Is(err, engine.ErrTooLarge):
		e.Code = wire.CodeTooLarge
	case errors.Is(err, engine.ErrBadView):
		e.Code = wire.CodeBadRequest
	case errors.Is(err, wire.ErrInvalidID), errors.Is(err, errBadRequest), errors.Is(err, engine.ErrBadRequest):
		e.Code = wire.CodeBadRequest
	case isTransient(err):
		e.Code = wire.CodeUnavailable
	}
	return e
}

// isStorageRefusal tells a save the engine refused (part of its result) from storage trouble
// (retried).
func isStorageRefusal(err error) bool {
	var ve *codec.ValidationError
	return errors.As(err, &ve) || errors.Is(err, engine.ErrVersionConflict) || errors.Is(err, engine.ErrBadRequest) ||
		errors.Is(err, engine.ErrCorrupt) || errors.Is(err, engine.ErrLeased) || errors.Is(err, engine.ErrFenced) ||
		errors.Is(err, engine.ErrMoved) || errors.Is(err, engine.ErrHashMismatch) || errors.Is(err, engine.ErrUnknownFormat) ||
		errors.Is(err, engine.ErrTooLarge)
}
