package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

func TestFork(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{PackEntries: 8})
	src, dst := engine.Key{Namespace: "n", Session: "src", Agent: "a"}, engine.Key{Namespace: "n", Session: "dst", Agent: "a"}
	saveTurns(t, e, src, 0, 60)
	s, err := e.Fork(ctx, engine.ForkRequest{From: src, Version: 17, To: dst, SaveID: "fork-1", Now: now})
	require.NoError(t, err)
	require.Equal(t, uint64(1), s.Record.Version)
	require.Equal(t, &engine.ForkRef{Key: src, Version: 17}, s.Record.ForkOf)
	require.Equal(t, engine.ReasonFork, s.Record.Reason)
	s, err = e.Fork(ctx, engine.ForkRequest{From: src, Version: 17, To: dst, SaveID: "fork-1", Now: now})
	require.NoError(t, err)
	require.True(t, s.Duplicate, "a fork delivered again")
	_, err = e.Fork(ctx, engine.ForkRequest{From: src, To: dst, SaveID: "fork-2", Now: now})
	require.ErrorIs(t, err, engine.ErrVersionConflict, "the target exists")
	_, err = e.Fork(ctx, engine.ForkRequest{From: src, Version: 99, To: engine.Key{Namespace: "n", Session: "x", Agent: "a"}, SaveID: "f", Now: now})
	require.ErrorIs(t, err, engine.ErrNotFound)

	// The fork goes on on its own; the source's packs do not touch it.
	for n := 36; n <= 60; n += 2 {
		_, err := save(e, engine.SaveRequest{Key: dst, SaveID: string(rune('a' + n)), Payload: conversation(n)})
		require.NoError(t, err)
	}
	saveTurns(t, e, src, 60, 80)
	e.Forget()
	got, _, err := e.Read(ctx, dst, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(60)), string(got))
	got, _, err = e.Read(ctx, dst, 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(34)), string(got))
}
