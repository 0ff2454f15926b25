// Package edge is where the daemon meets its storage and its protocol: it opens the log engine's
// stream CP_LOG (logopen.go: each request bounded in time, entries sealed with --namespace-keys),
// sets up the protocol's streams CP_INGEST, CP_CHUNKS and CP_RESULTS (streams.go) and reads them
// from their leaders when replicated (leaderget.go), and maps the engine's keys, records and errors
// to the protocol's (engineedge.go: ToWireError is the one mapping of errors to wire codes). The
// ingest, the service and the daemon's assembly all build on it; it imports none of them.
package edge

import (
	"errors"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The edge between the protocol (internal/wire) and the storage domain (internal/engine): the one
// place where the engine's keys, records, leases and errors become the protocol's. The engine knows
// nothing of wire, so a protocol change is not a storage change.

// KeyOf is the engine's key of a protocol key.
func KeyOf(k wire.Key) engine.Key {
	return engine.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
}

// WireKey is the protocol's key of an engine key.
func WireKey(k engine.Key) wire.Key {
	return wire.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
}

// VersionOf is the protocol's version record of an engine record. Gen has no meaning on the log
// engine (a version's messages are wherever its log's entries are) and is always 0
// (docs/protocol.md §6).
func VersionOf(r engine.Record) wire.Version {
	v := wire.Version{
		Format: wire.VersionFormat, Key: WireKey(r.Key), Version: r.Version, Parent: r.Parent, Hash: r.Hash,
		SaveID: r.SaveID, Writer: r.Writer, Reason: r.Reason, Created: r.Created, RawBytes: r.RawBytes,
		StoredBytes: r.StoredBytes, Dialect: r.Dialect,
		Counts: wire.Counts{Messages: r.Counts.Messages, User: r.Counts.User, Assistant: r.Counts.Assistant,
			ToolResult: r.Counts.ToolResult, Extension: r.Counts.Extension, ToolCalls: r.Counts.ToolCalls, System: r.Counts.System},
	}
	if f := r.ForkOf; f != nil {
		v.ForkOf = &wire.ForkRef{Key: WireKey(f.Key), Version: f.Version}
	}
	if o := r.Origin; o != nil {
		v.Origin = &wire.Origin{Via: o.Via, Source: o.Source, At: o.At}
	}
	return v
}

// ForkRefOf and originOf carry a save's fork reference and import origin to the engine.
func ForkRefOf(f *wire.ForkRef) *engine.ForkRef {
	if f == nil {
		return nil
	}
	return &engine.ForkRef{Key: KeyOf(f.Key), Version: f.Version}
}

func OriginOf(o wire.Origin) engine.Origin {
	return engine.Origin{Via: o.Via, Source: o.Source, At: o.At}
}

// LeaseOf is the protocol's lease of a session's lease state.
func LeaseOf(key wire.Key, ls engine.LeaseState) wire.Lease {
	return wire.Lease{Key: key, Epoch: ls.Lease.Epoch, Owner: ls.Lease.Owner, Acquired: ls.Lease.Acquired,
		Expires: ls.Lease.Expires, Head: ls.Head}
}

// SessionHeadOf is a session as a listing shows it.
func SessionHeadOf(h engine.SessionHead) wire.SessionHead {
	out := wire.SessionHead{Version: VersionOf(h.Record)}
	out.Key = WireKey(h.Key)
	if h.Lease != nil {
		l := LeaseOf(out.Key, engine.LeaseState{Lease: *h.Lease, Head: h.Record.Version})
		out.Lease = &l
	}
	if h.Moved != nil {
		out.Moved = &wire.Moved{To: h.Moved.To, At: h.Moved.At}
	}
	return out
}

// ToWireError turns an error into the refusal a client sees: a stable code plus what was wrong and
// where. It is the one mapping of the engine's errors (and the codec's) to the protocol's codes.
func ToWireError(err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	e := &wire.Error{Code: wire.CodeInternal, Message: err.Error()}
	var ve *codec.ValidationError
	var ce *engine.ConflictError
	var le *engine.LeaseError
	var me *engine.MovedError
	var re *engine.SaveIDReusedError
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
	case errors.As(err, &re):
		e.Code, e.Version = wire.CodeSaveIDReused, &re.Version
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
	case errors.Is(err, wire.ErrInvalidID), errors.Is(err, ErrBadRequest), errors.Is(err, engine.ErrBadRequest):
		e.Code = wire.CodeBadRequest
	case IsTransient(err):
		e.Code = wire.CodeUnavailable
	}
	return e
}

// IsStorageRefusal tells a save the engine refused (part of its result) from storage trouble
// (retried): the engine's refusals (engine.IsRefusal), and what storage holds or accepts that
// trying again would not change (a corrupt or unknown entry, an entry too large).
func IsStorageRefusal(err error) bool {
	return engine.IsRefusal(err) || errors.Is(err, engine.ErrCorrupt) || errors.Is(err, engine.ErrUnknownFormat) ||
		errors.Is(err, engine.ErrTooLarge)
}
