package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

func TestPrune(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{PackEntries: 4})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, e, k, 0, 2*12)
	res, err := e.Prune(ctx, k, engine.Retention{KeepLast: 5}, now, true)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3, 4, 5, 6, 7}, res.Versions)
	require.Equal(t, 5, res.Kept)
	h, err := e.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, h, 12, "a dry run removes nothing")

	_, err = e.Prune(ctx, k, engine.Retention{KeepLast: 5, MaxAge: time.Hour}, now.Add(30*time.Minute), false)
	require.NoError(t, err)
	require.Len(t, mustHistory(t, e, k), 12, "young versions are kept by age")
	_, err = e.Prune(ctx, k, engine.Retention{KeepLast: 5}, now, false)
	require.NoError(t, err)
	for _, cold := range []bool{false, true} {
		if cold {
			e.Forget()
		}
		h = mustHistory(t, e, k)
		require.Len(t, h, 5)
		require.Equal(t, uint64(8), h[0].Version)
		_, _, err = e.Read(ctx, k, 7, engine.ReadOptions{})
		require.ErrorIs(t, err, engine.ErrNotFound)
		_, err = e.Version(ctx, k, 3)
		require.ErrorIs(t, err, engine.ErrNotFound)
		got, _, err := e.Read(ctx, k, 8, engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		require.Equal(t, string(conversation(16)), string(got))
		recs, next, err := e.HistoryPage(ctx, k, engine.HistoryCursor{}, 100)
		require.NoError(t, err)
		require.Len(t, recs, 5)
		require.Zero(t, next)
	}
	saveTurns(t, e, k, 24, 30)
	require.Len(t, mustHistory(t, e, k), 8)
}

func mustHistory(t *testing.T, e *engine.Engine, k engine.Key) []engine.Record {
	t.Helper()
	h, err := e.History(ctx, k)
	require.NoError(t, err)
	return h
}

// noDeletes is a Log whose Delete does nothing, as a crash right after a commit would leave it.
type noDeletes struct{ engine.Log }

func (noDeletes) Delete(ctxT, engine.Key, ...uint64) error { return nil }

func TestDelete(t *testing.T) {
	for _, crash := range []bool{false, true} {
		log := engine.Log(nil)
		e, mem := newEngine(t, 1<<20, engine.Config{PackEntries: 4})
		log = mem
		if crash {
			log = noDeletes{mem}
		}
		e = engine.New(log, engine.Config{PackEntries: 4})
		k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
		saveTurns(t, e, k, 0, 2*10)
		_, err := e.Delete(ctx, k, u64(3))
		require.ErrorIs(t, err, engine.ErrVersionConflict)
		_, _, err = e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Minute, Now: now})
		require.NoError(t, err)
		rec, err := e.Delete(ctx, k, u64(10))
		require.NoError(t, err)
		require.Equal(t, uint64(10), rec.Version)
		if !crash {
			require.Equal(t, 1, entries(t, mem, k), "only the deletion is left")
		}
		for _, cold := range []bool{false, true} {
			if cold {
				e.Forget()
			}
			_, err = e.Head(ctx, k)
			require.ErrorIs(t, err, engine.ErrNotFound)
			_, err = e.History(ctx, k)
			require.ErrorIs(t, err, engine.ErrNotFound)
			_, err = e.Delete(ctx, k, nil)
			require.ErrorIs(t, err, engine.ErrNotFound)
			st, err := e.LeaseStatus(ctx, k)
			require.NoError(t, err)
			require.Equal(t, uint64(1), st.Lease.Epoch, "the epoch survives the deletion")
			require.Empty(t, st.Lease.Owner)
		}
		// A new session under the same key starts at version 1, and packs over what a crash left.
		_, err = save(e, engine.SaveRequest{Key: k, SaveID: "save-0", Payload: conversation(2)})
		require.NoError(t, err, "a save id of the deleted session is new again")
		saveTurns(t, e, k, 2, 2*9)
		checkVersions(t, e, k, 9)
		checkHistory(t, e, k, 9)
		_, err = e.Release(ctx, engine.LeaseRequest{Key: k, Epoch: 1, Now: now})
		require.ErrorIs(t, err, engine.ErrFenced, "the old epoch stays fenced")
	}
}
