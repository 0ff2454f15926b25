package engine_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
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

// Deep history pages go on from the pack the last one ended in; a forged or stale cursor only
// costs a walk from the head.
func TestEngine_HistoryPageCursor(t *testing.T) {
	mem := memlog.New(1 << 20)
	log := &countingLog{Log: mem}
	e := engine.New(log, engine.Config{PackEntries: 8})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, e, k, 0, 2*100)
	recs, cur, err := e.HistoryPage(ctx, k, engine.HistoryCursor{}, 30)
	require.NoError(t, err)
	require.Equal(t, uint64(71), recs[29].Version)
	require.NotZero(t, cur.Pack, "the page ended in a pack")
	log.reads = 0
	deep, next, err := e.HistoryPage(ctx, k, cur, 30)
	require.NoError(t, err)
	hinted := log.reads
	log.reads = 0
	_, _, err = e.HistoryPage(ctx, k, engine.HistoryCursor{Before: cur.Before}, 30)
	require.NoError(t, err)
	require.Less(t, hinted, log.reads, "the cursor's pack saves the walk from the head")
	require.Equal(t, uint64(70), deep[0].Version)
	require.Equal(t, uint64(41), deep[29].Version)
	for _, forged := range []uint64{1, cur.Pack + 1, 1 << 40} {
		again, next2, err := e.HistoryPage(ctx, k, engine.HistoryCursor{Before: cur.Before, Pack: forged}, 30)
		require.NoError(t, err, "pack %d", forged)
		require.Equal(t, deep, again)
		require.Equal(t, next, next2)
	}
	other := engine.Key{Namespace: "n", Session: "other", Agent: "a"}
	saveTurns(t, e, other, 0, 40)
	var theirs uint64
	require.NoError(t, mem.Range(ctx, other, 0, 0, func(en engine.Entry) bool { theirs = en.Seq; return false }))
	again, _, err := e.HistoryPage(ctx, k, engine.HistoryCursor{Before: cur.Before, Pack: theirs}, 30)
	require.NoError(t, err)
	require.Equal(t, deep, again, "another session's pack is not this one's")
}

// countingLog counts the reads of entries (Last, Get, Range).
type countingLog struct {
	engine.Log
	reads int
	moved int // Moved: no entry read
}

func (c *countingLog) Moved(cx ctxT, k engine.Key, seq uint64) (bool, error) {
	c.moved++
	return c.Log.Moved(cx, k, seq)
}

func (c *countingLog) Last(cx ctxT, k engine.Key) (engine.Entry, error) {
	c.reads++
	return c.Log.Last(cx, k)
}

func (c *countingLog) Get(cx ctxT, k engine.Key, seq uint64) (engine.Entry, error) {
	c.reads++
	return c.Log.Get(cx, k, seq)
}

func (c *countingLog) Range(cx ctxT, k engine.Key, from, upTo uint64, fn func(engine.Entry) bool) error {
	c.reads++
	return c.Log.Range(cx, k, from, upTo, fn)
}
