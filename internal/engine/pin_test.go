package engine_test

import (
	"fmt"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// logBytes is the bytes of k's entries.
func logBytes(t *testing.T, log *memlog.Log, k engine.Key) int {
	t.Helper()
	n := 0
	require.NoError(t, log.Range(ctx, k, 0, 0, func(en engine.Entry) bool { n += len(en.Data); return true }))
	return n
}

// A fork writes a few hundred bytes, reads through its source (whose packs go on), and its first
// pack copies the source's version in and unpins it.
func TestFork_Pins(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{PackEntries: 8})
	src, dst := engine.Key{Namespace: "n", Session: "src", Agent: "a"}, engine.Key{Namespace: "n", Session: "dst", Agent: "a"}
	saveTurns(t, e, src, 0, 400) // 200 versions, ~70 KB
	s, err := e.Fork(ctx, engine.ForkRequest{From: src, Version: 170, To: dst, SaveID: "f", Now: now})
	require.NoError(t, err)
	require.True(t, s.PackDue)
	require.Equal(t, hashOf(conversation(340)), s.Record.Hash)
	require.Less(t, logBytes(t, log, dst), 1024, "a fork shares what it forked")
	st, err := e.LeaseStatus(ctx, src) // the pin is in the source's head
	require.NoError(t, err)
	require.Equal(t, uint64(200), st.Head)

	// The source goes on and packs; the fork goes on; both read as they should, cold too.
	saveTurns(t, e, src, 400, 440)
	for n := 342; n <= 350; n += 2 {
		_, err := save(e, engine.SaveRequest{Key: dst, SaveID: fmt.Sprint(n), Payload: conversation(n)})
		require.NoError(t, err)
	}
	e.Forget()
	check := func() {
		t.Helper()
		for v, n := range map[uint64]int{1: 340, 2: 342, 6: 350} {
			got, rec, err := e.Read(ctx, dst, v, engine.ReadOptions{Verify: true})
			require.NoError(t, err, "version %d", v)
			require.Equal(t, string(conversation(n)), string(got))
			require.Equal(t, &engine.ForkRef{Key: src, Version: 170}, mustVersion(t, e, dst, 1).ForkOf)
			z, rec2, err := e.ReadZstd(ctx, dst, v)
			require.NoError(t, err)
			require.Equal(t, rec, rec2)
			d, _ := zstd.NewReader(nil)
			plain, err := d.DecodeAll(z, nil)
			require.NoError(t, err)
			require.Equal(t, string(got), string(plain))
		}
		checkHistoryOf(t, e, dst, 6)
	}
	check()

	// The fork's pack copies the source in: then the source can go without a copy.
	r, err := e.Pack(ctx, dst, true) // the daemon packs right after a fork (PackDue); here, later
	require.NoError(t, err)
	require.Positive(t, r.Entries)
	check()

	// A fork of a fork reads through one session: the one it forked.
	dst2 := engine.Key{Namespace: "n", Session: "dst2", Agent: "a"}
	_, err = e.Fork(ctx, engine.ForkRequest{From: dst, Version: 3, To: dst2, SaveID: "f2", Now: now})
	require.NoError(t, err)
	got, _, err := e.Read(ctx, dst2, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(344)), string(got))
	_, err = e.Delete(ctx, src, nil)
	require.NoError(t, err)
	check()
	// dst2 still reads through dst (dst's pack kept every version).
	got, _, err = e.Read(ctx, dst2, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(344)), string(got))
}

func mustVersion(t *testing.T, e *engine.Engine, k engine.Key, v uint64) engine.Record {
	t.Helper()
	r, err := e.Version(ctx, k, v)
	require.NoError(t, err)
	return r
}

func checkHistoryOf(t *testing.T, e *engine.Engine, k engine.Key, n int) {
	t.Helper()
	h, err := e.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, h, n)
	page, _, err := e.HistoryPage(ctx, k, engine.HistoryCursor{}, 100)
	require.NoError(t, err)
	require.Len(t, page, n)
	require.Equal(t, h[0], page[n-1])
}

// Deleting or pruning a source copies the forks that read it in first; a stale pin (a crash
// between a fork's pack and its unpin) is dropped.
func TestFork_SourceGoes(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{PackEntries: 8})
	src := engine.Key{Namespace: "n", Session: "src", Agent: "a"}
	fork := func(i int, v uint64) engine.Key {
		k := engine.Key{Namespace: "n", Session: fmt.Sprint("f", i), Agent: "a"}
		_, err := e.Fork(ctx, engine.ForkRequest{From: src, Version: v, To: k, SaveID: "f", Now: now})
		require.NoError(t, err)
		return k
	}
	saveTurns(t, e, src, 0, 60)
	f1, f2, f3 := fork(1, 5), fork(2, 20), fork(3, 28)

	// A crash after f3's pack, before its unpin: a stale pin.
	engine.CrashBeforeDeletes(e, true)
	_, err := e.Pack(ctx, f3, false)
	require.NoError(t, err)
	engine.CrashBeforeDeletes(e, false)

	// Retention up to version 10 copies f1 in; f2 still reads through.
	_, err = e.Prune(ctx, src, engine.Retention{KeepLast: 20}, now, false)
	require.NoError(t, err)
	_, _, err = e.Read(ctx, src, 5, engine.ReadOptions{})
	require.ErrorIs(t, err, engine.ErrNotFound)
	for k, n := range map[engine.Key]int{f1: 10, f2: 40, f3: 56} {
		got, _, err := e.Read(ctx, k, 1, engine.ReadOptions{Verify: true})
		require.NoError(t, err, "%s", k)
		require.Equal(t, string(conversation(n)), string(got))
	}
	before := logBytes(t, log, f2)
	_, err = e.Delete(ctx, src, nil)
	require.NoError(t, err)
	require.Greater(t, logBytes(t, log, f2), before, "f2 was copied in")
	e.Forget()
	for k, n := range map[engine.Key]int{f1: 10, f2: 40, f3: 56} {
		got, _, err := e.Read(ctx, k, 1, engine.ReadOptions{Verify: true})
		require.NoError(t, err, "%s", k)
		require.Equal(t, string(conversation(n)), string(got))
	}
}

// A session holds a bounded number of pins: forks beyond it are copies, with the same record.
func TestFork_ManyForksAreCopies(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	src := engine.Key{Namespace: "n", Session: "src", Agent: "a"}
	saveTurns(t, e, src, 0, 38)
	big := fmt.Sprintf(`[{"role":"user","content":%q}]`, image(3000)) // incompressible, inline
	_, err := save(e, engine.SaveRequest{Key: src, SaveID: "big", Base: u64(19), Payload: []byte(big)})
	require.NoError(t, err)
	want := string(conversation(38)[:len(conversation(38))-1]) + "," + big[1:]
	for i := range 66 {
		k := engine.Key{Namespace: "n", Session: fmt.Sprint("f", i), Agent: "a"}
		s, err := e.Fork(ctx, engine.ForkRequest{From: src, Version: 20, To: k, SaveID: "f", Now: now})
		require.NoError(t, err)
		require.Equal(t, &engine.ForkRef{Key: src, Version: 20}, s.Record.ForkOf)
		require.Equal(t, hashOf([]byte(want)), s.Record.Hash)
		if i >= 64 {
			require.Greater(t, logBytes(t, log, k), 3000, "fork %d is a copy", i)
		} else {
			require.Less(t, logBytes(t, log, k), 1024, "fork %d is a pin", i)
		}
	}
	_, err = e.Delete(ctx, src, nil)
	require.NoError(t, err)
	got, _, err := e.Read(ctx, engine.Key{Namespace: "n", Session: "f7", Agent: "a"}, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, want, string(got))
}

// A fork of a fork not packed yet packs it first: reads go through one session, however long the
// chain of forks.
func TestFork_Chain(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	prev := engine.Key{Namespace: "n", Session: "s0", Agent: "a"}
	saveTurns(t, e, prev, 0, 40)
	for i := 1; i <= 20; i++ {
		k := engine.Key{Namespace: "n", Session: fmt.Sprint("s", i), Agent: "a"}
		_, err := e.Fork(ctx, engine.ForkRequest{From: prev, To: k, SaveID: "f", Now: now})
		require.NoError(t, err)
		prev = k
	}
	got, _, err := e.Read(ctx, prev, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(40)), string(got))
	require.Less(t, logBytes(t, log, prev), 1024, "the last fork is not packed yet")
}
