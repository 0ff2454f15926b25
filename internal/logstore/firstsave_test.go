package logstore_test

import (
	"fmt"

	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/logstore"
)

// A save creating a session (Expected 0) that an engine has not cached appends without reading
// the head (engine.saveOnce); on JetStream its creation also writes the namespace's index entry.
// Where the session exists after all (another daemon made it, or deleted it and its log ends with
// the deletion), the compare-and-swap on an empty log fails, the index entry of the failed creation
// is taken back, and the save is decided again from the head: the session is listed once.
func TestEngine_FirstSaveOfASessionThatExists(t *testing.T) {
	a, l := startEngine(t, engine.Config{})
	b := engine.New(l, engine.Config{}) // another daemon on the same store
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	enginetest.SaveTurns(t, a, k, 0, 4, 0)

	_, err := b.Save(ctx, engine.SaveRequest{Key: k, SaveID: "b", Expected: enginetest.U64(0), Payload: enginetest.Conversation(2), Now: now})
	var conflict *engine.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, uint64(2), conflict.Head)
	saved, err := b.Save(ctx, engine.SaveRequest{Key: k, SaveID: "b2", Base: enginetest.U64(2), Payload: enginetest.Array(4, 6), Now: now})
	require.NoError(t, err, "b's cache is the log's after the conflict")
	require.Equal(t, uint64(3), saved.Record.Version)

	// Deleted through a: b, which cached the session, saves it anew from version 1 on.
	_, err = a.Delete(ctx, k, nil)
	require.NoError(t, err)
	c := engine.New(l, engine.Config{}) // a third, cold
	saved, err = c.Save(ctx, engine.SaveRequest{Key: k, SaveID: "c", Expected: enginetest.U64(0), Payload: enginetest.Conversation(2), Now: now})
	require.NoError(t, err)
	require.Equal(t, uint64(1), saved.Record.Version)
	got, _, err := a.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(enginetest.Conversation(2)), string(got))

	heads, _, err := a.Sessions(ctx, "n", 0, 10)
	require.NoError(t, err)
	require.Len(t, heads, 1, "listed once: %+v", heads)
}

// On a server older than 2.11 the index keeps every index entry written (a failed creation's is
// never taken back, docs/format.md §8.15b). A save creating a session that exists, from an engine
// that has not cached it (a client's retry of a first save whose answer was lost, a restart),
// must then not write one: once the log's first entry is packed away nothing tells the extra
// entries from the real one, and a listing paged through shows the session again and again.
func TestEngine_FirstSaveOfASessionThatExistsOldNATS(t *testing.T) {
	bin := logstore.OldNATS(t)
	nc := logstore.Connect(t, logstore.StartProcess(t, bin))
	cfg := engine.Config{PackEntries: 4}
	a, l := openEngine(t, nc, logstore.LogConfig{}, cfg)
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	enginetest.SaveTurns(t, a, k, 0, 2*10, 0) // packs: the log's first entry is deleted
	for i := range 3 {
		cold := engine.New(l, cfg)
		_, err := cold.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("retry-", i), Expected: enginetest.U64(0),
			Payload: enginetest.Conversation(2), Now: now})
		var conflict *engine.ConflictError
		require.ErrorAs(t, err, &conflict)
	}
	var listed []engine.Key
	for cursor, pages := uint64(0), 0; ; pages++ {
		require.Less(t, pages, 10)
		heads, next, err := a.Sessions(ctx, "n", cursor, 1)
		require.NoError(t, err)
		for _, h := range heads {
			listed = append(listed, h.Key)
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	require.Equal(t, []engine.Key{k}, listed, "the session is listed once")
}

// A first save begins its log's creation before it validates the conversation: the namespace's
// index entry is published at once (engine.Creator, docs/format.md §8.15j). A first save refused
// (not JSON, not an array, a message no dialect knows) deletes it again: the raw index lists
// nothing, and the key is listed once when it is saved.
func TestEngine_RefusedFirstSaveListsNothing(t *testing.T) {
	e, l := startEngine(t, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	for i, bad := range []string{`[{"role":"user","content":`, `{"role":"user"}`, `[{"role":"robot","content":"hi"}]`} {
		key := k
		key.Session = fmt.Sprint("refused-", i)
		_, err := e.Save(ctx, engine.SaveRequest{Key: key, SaveID: "x", Expected: enginetest.U64(0), Payload: []byte(bad), Now: now})
		var ve *codec.ValidationError
		require.ErrorAs(t, err, &ve, "%s", bad)
	}
	keys, _, err := l.Sessions(ctx, "n", 0, 10) // the index itself, not the engine's filtered listing
	require.NoError(t, err)
	require.Empty(t, keys, "a refused first save lists nothing")

	_, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "x", Expected: enginetest.U64(0), Payload: enginetest.Conversation(2), Now: now})
	require.NoError(t, err)
	keys, _, err = l.Sessions(ctx, "n", 0, 10)
	require.NoError(t, err)
	require.Equal(t, []engine.Key{k}, keys)
}
