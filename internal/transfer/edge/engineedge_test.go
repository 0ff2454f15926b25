package edge_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Every error the engine and the codec refuse with has the code docs/protocol.md §7 gives it,
// wrapped as the engine wraps them; the engine's refusals are a save's result, and storage
// trouble is retried. A new engine refusal that reaches clients as "internal", or that a save
// retries until it gives up, fails here.
func TestToWireError_EveryEngineError(t *testing.T) {
	k := engine.Key{Namespace: "n", Session: "s", Agent: "main"}
	wrap := func(err error) error { return fmt.Errorf("saving %s: %w", k, err) }
	invalid := func(sentinel error) error {
		return &codec.ValidationError{Err: sentinel, Index: 3, Field: "content[0].type", Offset: -1}
	}
	const refused, retried = 1, -1
	cases := []struct {
		name    string
		err     error
		code    string
		outcome int // edge.IsStorageRefusal: refused (part of a save's result), retried, or either (0)
	}{
		{"invalid conversation", invalid(codec.ErrMalformed), wire.CodeInvalid, refused},
		{"conversation too large", invalid(codec.ErrTooLarge), wire.CodeTooLarge, refused},
		{"unknown conversation format", invalid(codec.ErrUnknownFormatVersion), wire.CodeUnknownFormat, refused},
		{"stale version", &engine.ConflictError{Key: k, Expected: 1, Head: 2}, wire.CodeConflict, refused},
		{"leased", &engine.LeaseError{Key: k, Lease: engine.Lease{Epoch: 3, Owner: "a"}}, wire.CodeLeased, refused},
		{"fenced", &engine.LeaseError{Fenced: true, Key: k, Lease: engine.Lease{Epoch: 3}}, wire.CodeFenced, refused},
		{"moved", &engine.MovedError{Key: k, Moved: engine.Moved{To: "nats://elsewhere"}}, wire.CodeMoved, refused},
		{"save id reused", &engine.SaveIDReusedError{Key: k, SaveID: "x", Version: 4}, wire.CodeSaveIDReused, refused},
		{"hash mismatch", engine.ErrHashMismatch, wire.CodeInvalid, refused},
		{"bad request", engine.ErrBadRequest, wire.CodeBadRequest, refused},
		{"dialect mismatch", engine.ErrDialectMismatch, wire.CodeBadRequest, refused},
		{"version limit", engine.ErrVersionLimit, wire.CodeBadRequest, refused},
		{"corrupt", engine.ErrCorrupt, wire.CodeCorrupt, refused},
		{"unknown entry format", engine.ErrUnknownFormat, wire.CodeUnknownFormat, refused},
		{"entry too large", engine.ErrTooLarge, wire.CodeTooLarge, refused},
		{"not found", engine.ErrNotFound, wire.CodeNotFound, 0},
		{"bad view", engine.ErrBadView, wire.CodeBadRequest, 0},
		{"invalid id", wire.ErrInvalidID, wire.CodeBadRequest, 0},
		{"bad header", edge.ErrBadRequest, wire.CodeBadRequest, 0},
		{"session busy", engine.ErrBusy, wire.CodeUnavailable, retried},
		{"store unavailable", engine.ErrUnavailable, wire.CodeUnavailable, retried},
		{"timed out", context.DeadlineExceeded, wire.CodeUnavailable, retried},
		{"anything else", errors.New("disk on fire"), wire.CodeInternal, retried},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := wrap(c.err)
			require.Equal(t, c.code, edge.ToWireError(err).Code, "%v", err)
			if c.outcome != 0 {
				require.Equal(t, c.outcome == refused, edge.IsStorageRefusal(err), "%v", err)
			}
		})
	}
}

// The details a client needs to act on a refusal travel with its code.
func TestToWireError_CarriesWhatAndWhere(t *testing.T) {
	k := engine.Key{Namespace: "n", Session: "s", Agent: "main"}
	we := edge.ToWireError(&codec.ValidationError{Err: codec.ErrMalformed, Index: 3, Field: "content[0].type", Offset: 17})
	require.Equal(t, 3, *we.Index)
	require.Equal(t, "content[0].type", we.Field)
	require.EqualValues(t, 17, *we.Offset)
	require.EqualValues(t, 2, *edge.ToWireError(&engine.ConflictError{Key: k, Expected: 1, Head: 2}).Head)
	we = edge.ToWireError(&engine.LeaseError{Key: k, Lease: engine.Lease{Epoch: 3, Owner: "a"}})
	require.Equal(t, "a", we.Owner)
	require.EqualValues(t, 3, *we.Epoch)
	require.Equal(t, "nats://elsewhere", edge.ToWireError(&engine.MovedError{Key: k, Moved: engine.Moved{To: "nats://elsewhere"}}).MovedTo)
	require.EqualValues(t, 4, *edge.ToWireError(&engine.SaveIDReusedError{Key: k, Version: 4}).Version)
	busy := &wire.Error{Code: wire.CodeBusy, Message: "busy"}
	require.Same(t, busy, edge.ToWireError(fmt.Errorf("admission: %w", busy)), "a protocol error passes as it is")
}

// A listed session carries its lease as a lease request answers it (LeaseOf), with the head it
// lists, and its moved mark.
func TestSessionHeadOf_LeaseAndMoved(t *testing.T) {
	now := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	k := engine.Key{Namespace: "n", Session: "s", Agent: "main"}
	h := engine.SessionHead{Key: k, Record: engine.Record{Key: k, Version: 7},
		Lease: &engine.Lease{Epoch: 3, Owner: "a", Acquired: now, Expires: now.Add(time.Minute)},
		Moved: &engine.Moved{To: "nats://elsewhere", At: now}}
	got := edge.SessionHeadOf(h)
	wk := wire.Key{Namespace: "n", Session: "s", Agent: "main"}
	require.Equal(t, wk, got.Key)
	require.EqualValues(t, 7, got.Version.Version)
	require.Equal(t, &wire.Lease{Key: wk, Epoch: 3, Owner: "a", Acquired: now, Expires: now.Add(time.Minute), Head: 7}, got.Lease)
	require.Equal(t, &wire.Moved{To: "nats://elsewhere", At: now}, got.Moved)

	h.Lease, h.Moved = nil, nil
	got = edge.SessionHeadOf(h)
	require.Nil(t, got.Lease)
	require.Nil(t, got.Moved)
}
