package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// The history scenarios (enginetest.RunHistory) on memlog; internal/logstore runs them on JetStream.
// Then again with every walk of few records by back pointer, whatever the tail's length, so that
// the pointers' every case (a pack, a fork's entry, a deletion, the first kept) is walked.
func TestEngine_HistoryWalk(t *testing.T) {
	enginetest.RunHistory(t, memlog.New(1<<20))
	t.Run("AlwaysBack", func(t *testing.T) {
		engine.AlwaysBack(t)
		enginetest.RunHistory(t, memlog.New(1<<20))
	})
}

// The newest records of a long tail are read by back pointer: a read of about as many entries as
// records wanted, ending at the one before the head, however long the tail.
func TestEngine_HistoryNewestByBack(t *testing.T) {
	log := &entryReads{Log: memlog.New(1 << 20)}
	e := engine.New(log, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	enginetest.SaveTurns(t, e, k, 0, 2*200, 0) // no pack yet: 200 entries since the first
	e.Forget()
	// Pages of more than 64 records too: a page of N reads about 1.5 N entries, not the whole
	// tail, while N is below half of it (else the tail, at most 2 N entries, is read at once).
	for _, limit := range []int{1, 10, 16, 65, 80, 99} {
		log.gets, log.ranges, log.ranged = 0, 0, 0
		recs, next, err := e.HistoryPage(ctx, k, engine.HistoryCursor{}, limit)
		require.NoError(t, err)
		require.Len(t, recs, limit)
		require.Equal(t, uint64(200), recs[0].Version)
		require.Equal(t, uint64(201-limit), next.Before)
		require.Zero(t, log.gets, "newest %d", limit)
		require.LessOrEqual(t, log.ranges, 1, "newest %d: reads", limit)
		require.LessOrEqual(t, log.ranged, 2*limit+2, "newest %d: entries read", limit)
	}
	log.gets, log.ranges, log.ranged = 0, 0, 0
	rec, err := e.Version(ctx, k, 195)
	require.NoError(t, err)
	require.Equal(t, uint64(195), rec.Version)
	require.Equal(t, 1, log.ranges)
	require.LessOrEqual(t, log.ranged, 12)
}

// Entries written before back pointers (the same bytes without flag bit 7) are read by the old
// path, also when newer entries with back pointers follow them in the tail (a walk by pointer
// reaching an old one reads the tail instead), until a pack.
func TestEngine_HistoryOldEntries(t *testing.T) {
	mem := memlog.New(1 << 20)
	old := &oldWriter{Log: mem}
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	cfg := engine.Config{PackEntries: 64}
	e := engine.New(old, cfg)
	enginetest.SaveTurns(t, e, k, 0, 2*100, 0) // a pack of 64, 36 old entries after it
	_, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "me", TTL: time.Hour, Now: enginetest.Now})
	require.NoError(t, err)
	require.NoError(t, mem.Range(ctx, k, 0, 0, func(en engine.Entry) bool {
		_, has, err := engine.BackOf(en.Data)
		require.NoError(t, err)
		require.False(t, has, "entry %d was written as before back pointers", en.Seq)
		return true
	}))
	enginetest.CheckHistory(t, e, k, 1, 100)

	e = engine.New(mem, cfg) // this code, on the old log
	enginetest.CheckHistory(t, e, k, 1, 100)
	ls, err := e.LeaseStatus(ctx, k)
	require.NoError(t, err)
	for v := 101; v <= 120; v++ { // new entries after old ones, in one tail
		enginetest.SaveTurns(t, e, k, 2*(v-1), 2*v, ls.Lease.Epoch)
		if v == 101 || v == 110 {
			last, err := mem.Last(ctx, k)
			require.NoError(t, err)
			_, has, err := engine.BackOf(last.Data)
			require.NoError(t, err)
			require.True(t, has, "a save names the entry before it, old or not")
			enginetest.CheckHistory(t, e, k, 1, uint64(v))
		}
	}
	enginetest.SaveTurns(t, e, k, 2*120, 2*200, ls.Lease.Epoch) // packs: the old entries go
	last, err := mem.Last(ctx, k)
	require.NoError(t, err)
	_, has, err := engine.BackOf(last.Data)
	require.NoError(t, err)
	require.True(t, has, "after a pack, entries have back pointers again")
	enginetest.CheckHistory(t, e, k, 1, 200)
}

// A back pointer that skips a version (or names an entry that is not the version before) makes
// the walk fail with ErrCorrupt; it never answers with a version missing or twice.
func TestEngine_HistoryBadBack(t *testing.T) {
	mem := memlog.New(1 << 20)
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	e := engine.New(mem, engine.Config{})
	enginetest.SaveTurns(t, e, k, 0, 2*100, 0)
	var seqs []uint64
	require.NoError(t, mem.Range(ctx, k, 0, 0, func(en engine.Entry) bool { seqs = append(seqs, en.Seq); return true }))
	for name, back := range map[string]uint64{
		"skips a version":   seqs[96], // version 97 where 99 is due
		"names the head":    seqs[99], // itself: not before it
		"repeats a version": seqs[98], // ... its own version again, from the entry before
		"before the log":    seqs[0] - 1,
	} {
		t.Run(name, func(t *testing.T) {
			at := seqs[99]
			if name == "repeats a version" {
				at = seqs[98]
			}
			bad := &rewriteAt{Log: mem, at: at, rewrite: func(d []byte) ([]byte, error) { return engine.WithBack(d, back) }}
			e := engine.New(bad, engine.Config{})
			_, _, err := e.HistoryPage(ctx, k, engine.HistoryCursor{}, 10)
			require.ErrorIs(t, err, engine.ErrCorrupt)
		})
	}
}

// entryReads counts the Gets, the Ranges and the entries they read.
type entryReads struct {
	engine.Log
	gets, ranges, ranged int
}

func (c *entryReads) Get(cx ctxT, k engine.Key, seq uint64) (engine.Entry, error) {
	c.gets++
	return c.Log.Get(cx, k, seq)
}

func (c *entryReads) Range(cx ctxT, k engine.Key, from, upTo uint64, fn func(engine.Entry) bool) error {
	c.ranges++
	return c.Log.Range(cx, k, from, upTo, func(en engine.Entry) bool { c.ranged++; return fn(en) })
}

// oldWriter stores entries as the engine wrote them before back pointers.
type oldWriter struct{ engine.Log }

func (o *oldWriter) Append(cx ctxT, k engine.Key, data []byte, after uint64) (uint64, error) {
	old, err := engine.WithoutBack(data)
	if err != nil {
		return 0, err
	}
	return o.Log.Append(cx, k, old, after)
}

// rewriteAt reads the entry at sequence at rewritten by rewrite (stored bytes turned hostile).
type rewriteAt struct {
	engine.Log
	at      uint64
	rewrite func(data []byte) ([]byte, error)
}

func (r *rewriteAt) fix(en engine.Entry, err error) (engine.Entry, error) {
	if err != nil || en.Seq != r.at {
		return en, err
	}
	data, err := r.rewrite(en.Data)
	return engine.Entry{Seq: en.Seq, Data: data}, err
}

func (r *rewriteAt) Last(cx ctxT, k engine.Key) (engine.Entry, error) {
	return r.fix(r.Log.Last(cx, k))
}

func (r *rewriteAt) Get(cx ctxT, k engine.Key, seq uint64) (engine.Entry, error) {
	return r.fix(r.Log.Get(cx, k, seq))
}

func (r *rewriteAt) Range(cx ctxT, k engine.Key, from, upTo uint64, fn func(engine.Entry) bool) error {
	var ferr error
	err := r.Log.Range(cx, k, from, upTo, func(en engine.Entry) bool {
		en, ferr = r.fix(en, nil)
		return ferr == nil && fn(en)
	})
	if err == nil {
		err = ferr
	}
	return err
}
