package engine_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

func TestEngine_SaveRead(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{PackEntries: 8})
	k := engine.Key{Namespace: "team", Session: "s.1 *", Agent: "main"}
	saveTurns(t, e, k, 0, 140) // 70 versions
	checkVersions(t, e, k, 70)

	// A daemon that restarts reads the head from the log; its next save starts a new frame.
	e.Forget()
	checkVersions(t, e, k, 70)
	saveTurns(t, e, k, 140, 160)
	e.Forget()
	checkVersions(t, e, k, 80)
	require.Equal(t, 10, entries(t, log, k), "every 8 saves packed into one, the packed ones deleted")

	history, err := e.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, history, 80)
	for i, rec := range history {
		require.Equal(t, uint64(i+1), rec.Version)
		require.Equal(t, uint64(i), rec.Parent)
		require.Equal(t, fmt.Sprintf("save-%d", 2*i), rec.SaveID)
		require.Equal(t, 2*(i+1), rec.Counts.Messages)
		require.Equal(t, i+1, rec.Counts.User)
		require.Equal(t, now, rec.Created)
		require.Equal(t, engine.ReasonTurn, rec.Reason)
		require.Equal(t, k, rec.Key)
		require.Positive(t, rec.StoredBytes)
		one, err := e.Version(ctx, k, rec.Version)
		require.NoError(t, err)
		require.Equal(t, rec, one)
	}
	head, err := e.Head(ctx, k)
	require.NoError(t, err)
	require.Equal(t, history[79], head)
}

func TestEngine_HistoryPage(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{PackEntries: 8})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, e, k, 0, 2*45) // 45 versions: 5 packs, 5 saves after them
	var got []uint64
	var cur engine.HistoryCursor
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		recs, next, err := e.HistoryPage(ctx, k, cur, 7)
		require.NoError(t, err)
		require.LessOrEqual(t, len(recs), 7)
		for _, r := range recs {
			got = append(got, r.Version)
		}
		if next == (engine.HistoryCursor{}) {
			break
		}
		cur = next
	}
	require.Len(t, got, 45)
	for i, v := range got {
		require.Equal(t, uint64(45-i), v, "newest first")
	}
	_, _, err := e.HistoryPage(ctx, k, engine.HistoryCursor{}, 0)
	require.ErrorIs(t, err, engine.ErrBadRequest)
}
