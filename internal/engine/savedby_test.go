package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// SavedBy finds the version a save id made without saving (a repeat whose conversation is gone:
// the daemon's chunked save sent again), in the log as another engine (another daemon) left it:
// an engine that cached the session before the other one saved reads the log's last entry first.
func TestSavedBy_FindsTheVersionASaveIDMadeAnotherEngineToo(t *testing.T) {
	a, log := newEngine(t, 1<<20, engine.Config{})
	b := engine.New(log, engine.Config{}) // another daemon on the same log
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	first, err := save(a, engine.SaveRequest{Key: k, SaveID: "x", Payload: conversation(2)})
	require.NoError(t, err)

	rec, ok, err := a.SavedBy(ctx, k, "x")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, first.Record, rec)

	_, ok, err = a.SavedBy(ctx, k, "y")
	require.NoError(t, err)
	require.False(t, ok, "not saved yet")
	second, err := save(b, engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(2, 4)})
	require.NoError(t, err)
	rec, ok, err = a.SavedBy(ctx, k, "y") // a's cached head is version 1
	require.NoError(t, err)
	require.True(t, ok, "found in the log, past a's cached head")
	require.Equal(t, second.Record.Version, rec.Version)
	rec, ok, err = a.SavedBy(ctx, k, "x") // no longer the head: among the recent records
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, first.Record.Version, rec.Version)

	_, ok, err = a.SavedBy(ctx, engine.Key{Namespace: "n", Session: "none", Agent: "a"}, "x")
	require.NoError(t, err)
	require.False(t, ok, "a session that does not exist has no versions")
}
