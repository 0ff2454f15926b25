package engine_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// A save id sent again with another conversation is not that save again: it is refused with a
// *SaveIDReusedError naming the version the save id made, instead of answering that version as
// if the new conversation were stored (docs/protocol.md §4.3). The same conversation, however it
// is sent (whitespace, a whole array for an append's version), is still the duplicate.
func TestSave_SaveIDReusedForOtherContent(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	first, err := save(e, engine.SaveRequest{Key: k, SaveID: "x", Payload: conversation(2)})
	require.NoError(t, err)
	second, err := save(e, engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(2, 4)})
	require.NoError(t, err)
	n := entries(t, log, k)

	reused := func(req engine.SaveRequest, want engine.Record) {
		t.Helper()
		_, err := save(e, req)
		var re *engine.SaveIDReusedError
		require.ErrorAs(t, err, &re, "save id %s with other bytes", req.SaveID)
		require.ErrorIs(t, err, engine.ErrSaveIDReused)
		require.Equal(t, want.Version, re.Version)
		require.Equal(t, want.Hash, re.Hash)
		require.Contains(t, err.Error(), req.SaveID)
	}
	same := func(req engine.SaveRequest, want engine.Record) {
		t.Helper()
		s, err := save(e, req)
		require.NoError(t, err, "save id %s with the same conversation", req.SaveID)
		require.True(t, s.Duplicate)
		require.Equal(t, want.Version, s.Record.Version)
	}
	spaced := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte(`},{`), []byte("},\n  {")) }

	for _, cold := range []bool{false, true} {
		if cold {
			e.Forget() // found in the log's records, not in the cache
		}
		// A whole array: its version is no longer the head.
		reused(engine.SaveRequest{Key: k, SaveID: "x", Payload: conversation(3)}, first.Record)
		reused(engine.SaveRequest{Key: k, SaveID: "x", Payload: []byte(`[]`)}, first.Record)
		same(engine.SaveRequest{Key: k, SaveID: "x", Payload: conversation(2)}, first.Record)
		same(engine.SaveRequest{Key: k, SaveID: "x", Payload: spaced(conversation(2))}, first.Record)
		// An append: more messages, fewer (the same last ones), other ones.
		reused(engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(2, 5)}, second.Record)
		reused(engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(3, 4)}, second.Record)
		reused(engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(4, 6)}, second.Record)
		same(engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: spaced(array(2, 4))}, second.Record)
		same(engine.SaveRequest{Key: k, SaveID: "y", Payload: conversation(4)}, second.Record)
	}
	require.Equal(t, n, entries(t, log, k), "refusals and duplicates write nothing")

	// Once the head moved on, the append is found by its base (savedAfter) and read from there.
	third, err := save(e, engine.SaveRequest{Key: k, SaveID: "z", Base: u64(2), Payload: array(4, 6)})
	require.NoError(t, err)
	reused(engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(2, 5)}, second.Record)
	same(engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(2, 4)}, second.Record)
	reused(engine.SaveRequest{Key: k, SaveID: "z", Base: u64(2), Payload: array(4, 7)}, third.Record)
	head, err := e.Head(ctx, k)
	require.NoError(t, err)
	require.Equal(t, third.Record.Version, head.Version, "nothing stored past the third save")
}
