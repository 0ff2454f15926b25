package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// Hostile review of group commit (s21-review1).

// A save sent twice in one group (a writer's retry queued behind its first send) is the
// duplicate of the first; when the store fails to write the group's entry, the retry must be told
// that failure too, not that the first send's version was stored: nothing was.
func TestSaveGroup_RepeatInGroupWhoseEntryFailed(t *testing.T) {
	log := &failingLog{Log: memlog.New(1 << 20), fail: 1}
	e := engine.New(log, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	first := engine.SaveRequest{Key: k, SaveID: "1", Base: u64(0), Payload: array(0, 2), Now: now}
	reqs := []engine.SaveRequest{
		first,
		first, // the same save again: a duplicate of the first, in the same entry
		{Key: k, SaveID: "2", Base: u64(1), Payload: array(2, 4), Now: now},
	}
	res := e.SaveGroup(ctx, reqs)
	require.Len(t, res, 3)
	for i, r := range res {
		require.ErrorIs(t, r.Err, errInjected, "save %d: nothing was stored", i+1)
	}
	_, _, err := engine.New(log, engine.Config{}).Read(ctx, k, 1, engine.ReadOptions{})
	require.ErrorIs(t, err, engine.ErrNotFound)
}
