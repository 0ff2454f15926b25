package logstore_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/logstore"
)

// askCounter counts the questions an engine asks its log: Moved, and Last.
type askCounter struct {
	engine.Log
	moved, lasts atomic.Int32
}

func (c *askCounter) Moved(ctx context.Context, k engine.Key, seq uint64) (bool, error) {
	c.moved.Add(1)
	return c.Log.Moved(ctx, k, seq)
}

func (c *askCounter) Last(ctx context.Context, k engine.Key) (engine.Entry, error) {
	c.lasts.Add(1)
	return c.Log.Last(ctx, k)
}

// Once Moved says the log moved past the head an engine holds for saves (another daemon saved),
// that head is not asked about again: later reads of the head read the log's last entry without
// the question, which, answered true, costs more than its 404 (the server looks for the log's next
// entry, which may lie far on in the stream, and sends it whole), on every restore until a save.
func TestEngine_StaleCachedHeadIsNotAskedAboutAgain(t *testing.T) {
	s, err := logstore.StartEmbedded(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	_, l := openEngine(t, logstore.Connect(t, s.ClientURL()), logstore.LogConfig{}, engine.Config{})
	counted := &askCounter{Log: l}
	reader := engine.New(counted, engine.Config{})
	writer, _ := openEngine(t, logstore.Connect(t, s.ClientURL()), logstore.LogConfig{}, engine.Config{})
	k := keyOfN("stale")
	head := func() uint64 {
		t.Helper()
		_, rec, err := reader.ReadZstdIf(ctx, k, 0, func(engine.Record) (bool, error) { return false, nil })
		require.NoError(t, err)
		return rec.Version
	}
	enginetest.SaveTurns(t, reader, k, 0, 2, 0)
	enginetest.SaveTurns(t, writer, k, 2, 4, 0)
	counted.moved.Store(0)
	require.Equal(t, uint64(2), head())
	require.Equal(t, int32(1), counted.moved.Load(), "the cached head, checked")
	for range 3 {
		counted.moved.Store(0)
		counted.lasts.Store(0)
		require.Equal(t, uint64(2), head())
		require.Zero(t, counted.moved.Load(), "the head the log moved past is not asked about again")
		require.Equal(t, int32(1), counted.lasts.Load(), "the last entry, read once")
	}
}
