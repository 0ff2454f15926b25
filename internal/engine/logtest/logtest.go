// Package logtest is the conformance suite of engine.Log: every implementation (engine/memlog in
// memory, internal/logstore on JetStream) runs it from its own tests, so the engine's rules can be
// tested on memlog and hold on the real store. Each case states the contract of log.go it checks.
package logtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// Options give the cases what only the store's own test can make. The zero value runs every case
// that needs none of them.
type Options struct {
	// Other returns another Log on l's store, as a second daemon opens it (on a cluster, through
	// another node than l's). nil: l itself.
	Other func(t *testing.T, l engine.Log) engine.Log
	// Fill makes l's store refuse what would take it past about free more bytes (a full disk, an
	// operator's limit), until the returned function is called. nil: the case that needs it is
	// skipped.
	Fill func(t *testing.T, l engine.Log, free int) (unfill func())
}

// Run runs every case against logs made by newLog, which must return a fresh, empty log each time
// (a case may write anything to it), cleaned up when its t ends. Cases run one after another.
// At most one Options is read.
func Run(t *testing.T, newLog func(t *testing.T) engine.Log, options ...Options) {
	var opts Options
	if len(options) > 0 {
		opts = options[0]
	}
	if opts.Other == nil {
		opts.Other = func(_ *testing.T, l engine.Log) engine.Log { return l }
	}
	cases := []struct {
		name string
		fn   func(t *testing.T, l engine.Log, opts Options)
	}{
		{"Append/EmptyLogExpectsZero", plain(testAppendEmptyExpectsZero)},
		{"Append/StaleAfterWritesNothing", plain(testAppendStaleAfter)},
		{"Append/ConcurrentOneWinsPerSequence", plain(testAppendConcurrent)},
		{"Append/SequencesGrowAcrossLogs", plain(testSequencesGrow)},
		{"Append/KeepsItsOwnCopy", plain(testAppendCopies)},
		{"Append/RefusedCreationTriedAgainListedOnce", testRefusedCreationRetried},
		{"Create/AppendedListedOnce", plain(testCreateAppended)},
		{"Create/AbandonedListsNothing", plain(testCreateAbandoned)},
		{"Create/OfALogThatExistsListedOnce", plain(testCreateExisting)},
		{"Create/RacingCreationsOneWins", plain(testCreateRacing)},
		{"Last/ReadYourWrites", plain(testLastReadYourWrites)},
		{"Lasts/HeadsInTheOrderOfKeys", plain(testLastsOrder)},
		{"Moved/OnlyItsOwnLogAfterTheSequence", plain(testMoved)},
		{"Lasts/MoreKeysAndBytesThanARequest", plain(testLastsMany)},
		{"ReadYourWrites/AcrossTwoLogsOnOneStore", testReadYourWritesAcrossLogs},
		{"Get/OnlyItsOwnLog", plain(testGet)},
		{"Range/BoundsAndOrder", plain(testRangeBounds)},
		{"Range/EarlyStop", plain(testRangeEarlyStop)},
		{"Range/MoreEntriesThanABatch", plain(testRangeManyEntries)},
		{"Range/MoreBytesThanABatch", plain(testRangeManyBytes)},
		{"Delete/SkipsMissingAndOtherLogs", plain(testDelete)},
		{"Delete/RefusesTheLastEntry", plain(testDeleteLast)},
		{"Purge/LogAndSessionGone", plain(testPurge)},
		{"Purge/KeyCreatedAgain", plain(testPurgeRecreate)},
		{"Purge/RacingACreation", plain(testPurgeRacingCreation)},
		{"Sessions/PagesInCreationOrder", plain(testSessionsPaging)},
		{"Sessions/ManySessionsLargeLimit", plain(testSessionsLargeLimit)},
		{"Sessions/ConcurrentCreationListedOnce", plain(testSessionsConcurrentCreation)},
		{"Namespaces/Sorted", plain(testNamespaces)},
		{"Namespaces/AfterEverySessionIsPurged", plain(testNamespacesAfterPurge)},
		{"Values/CreatedOnce", plain(testValues)},
		{"MaxEntry/TooLarge", plain(testMaxEntry)},
		{"HostileIDs/NeverCollide", plain(testHostileIDs)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			c.fn(t, newLog(t), opts)
			if d := time.Since(start); d > 2*time.Second {
				t.Logf("took %v", d.Round(time.Millisecond))
			}
		})
	}
}

// plain is a case that needs no Options.
func plain(fn func(t *testing.T, l engine.Log)) func(t *testing.T, l engine.Log, _ Options) {
	return func(t *testing.T, l engine.Log, _ Options) { fn(t, l) }
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func key(ns, session string) engine.Key {
	return engine.Key{Namespace: ns, Session: session, Agent: "main"}
}

// appendN appends n entries "<prefix>-<i>" to k, each after the one before, and returns them.
func appendN(t *testing.T, l engine.Log, k engine.Key, prefix string, n int) []engine.Entry {
	t.Helper()
	ctx := ctxOf(t)
	var after uint64
	if last, err := l.Last(ctx, k); err == nil {
		after = last.Seq
	} else {
		require.ErrorIs(t, err, engine.ErrNotFound)
	}
	out := make([]engine.Entry, 0, n)
	for i := range n {
		data := []byte(fmt.Sprintf("%s-%d", prefix, i))
		seq, err := l.Append(ctx, k, data, after)
		require.NoError(t, err, "append %d to %s", i, k)
		out = append(out, engine.Entry{Seq: seq, Data: data})
		after = seq
	}
	return out
}

// rangeAll returns what Range calls fn with.
func rangeAll(t *testing.T, l engine.Log, k engine.Key, from, upTo uint64) []engine.Entry {
	t.Helper()
	var out []engine.Entry
	require.NoError(t, l.Range(ctxOf(t), k, from, upTo, func(e engine.Entry) bool {
		out = append(out, e)
		return true
	}))
	return out
}

// requireEntries checks got against want, entry by entry (nil and empty data are the same).
func requireEntries(t *testing.T, want, got []engine.Entry) {
	t.Helper()
	require.Equal(t, len(want), len(got), "number of entries")
	for i := range want {
		require.Equal(t, want[i].Seq, got[i].Seq, "entry %d's sequence", i)
		require.True(t, bytes.Equal(want[i].Data, got[i].Data), "entry %d (seq %d): data %q, want %q", i, want[i].Seq, got[i].Data, want[i].Data)
	}
}

// soon retries check until it passes (for up to 10 s): what a Log shows of a delete (Delete,
// Purge, the index entry a lost creation removes) may reach a replicated store's readers a moment
// after the call returned (log.go: Range, Sessions). Appends are checked at once: every read sees
// them.
func soon(t *testing.T, check func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rangeIs reports how Range differs from want.
func rangeIs(l engine.Log, k engine.Key, from, upTo uint64, want ...engine.Entry) func() error {
	return func() error {
		var got []engine.Entry
		if err := l.Range(context.Background(), k, from, upTo, func(e engine.Entry) bool { got = append(got, e); return true }); err != nil {
			return err
		}
		if !slices.EqualFunc(want, got, func(a, b engine.Entry) bool { return a.Seq == b.Seq && bytes.Equal(a.Data, b.Data) }) {
			return fmt.Errorf("Range of %s [%d, %d]: got %v, want %v", k, from, upTo, seqsOf(got), seqsOf(want))
		}
		return nil
	}
}

func seqsOf(es []engine.Entry) []uint64 {
	out := make([]uint64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return out
}

// sessionsAre reports how the pages of ns differ from want.
func sessionsAre(l engine.Log, ns string, limit int, want ...engine.Key) func() error {
	return func() error {
		var got []engine.Key
		var cursor uint64
		for {
			keys, next, err := l.Sessions(context.Background(), ns, cursor, limit)
			if err != nil {
				return err
			}
			got = append(got, keys...)
			if next == 0 {
				break
			}
			cursor = next
		}
		if !slices.Equal(want, got) {
			return fmt.Errorf("Sessions of %q: got %v, want %v", ns, got, want)
		}
		return nil
	}
}

// allSessions walks every page of ns with the given limit.
func allSessions(t *testing.T, l engine.Log, ns string, limit int) []engine.Key {
	t.Helper()
	var out []engine.Key
	var cursor uint64
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100_000, "Sessions never ends")
		keys, next, err := l.Sessions(ctxOf(t), ns, cursor, limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(keys), limit, "a page holds at most limit keys")
		out = append(out, keys...)
		if next == 0 {
			return out
		}
		require.NotEqual(t, cursor, next, "the cursor moves on")
		cursor = next
	}
}

// An empty log takes an Append only after 0; the first Append's sequence is not 0.
func testAppendEmptyExpectsZero(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	k := key("n", "s")
	_, err := l.Last(ctx, k)
	require.ErrorIs(t, err, engine.ErrNotFound)
	_, err = l.Append(ctx, k, []byte("x"), 7)
	require.ErrorIs(t, err, engine.ErrConflict, "an empty log's last sequence is 0, not 7")
	_, err = l.Last(ctx, k)
	require.ErrorIs(t, err, engine.ErrNotFound, "a lost compare-and-swap writes nothing")
	soon(t, sessionsAre(l, "n", 10)) // a lost compare-and-swap does not list the session

	seq, err := l.Append(ctx, k, []byte("first"), 0)
	require.NoError(t, err)
	require.NotZero(t, seq)
	last, err := l.Last(ctx, k)
	require.NoError(t, err)
	requireEntries(t, []engine.Entry{{Seq: seq, Data: []byte("first")}}, []engine.Entry{last})

	// An empty entry is an entry.
	seq2, err := l.Append(ctx, k, nil, seq)
	require.NoError(t, err)
	e, err := l.Get(ctx, k, seq2)
	require.NoError(t, err)
	require.Empty(t, e.Data)
	require.Equal(t, seq2, e.Seq)
}

// An Append whose after is not the last sequence gets ErrConflict and writes nothing.
func testAppendStaleAfter(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	k := key("n", "s")
	es := appendN(t, l, k, "e", 3)
	for _, after := range []uint64{0, es[0].Seq, es[1].Seq, es[2].Seq + 1, es[2].Seq + 1000} {
		_, err := l.Append(ctx, k, []byte("stale"), after)
		require.ErrorIs(t, err, engine.ErrConflict, "after %d", after)
	}
	requireEntries(t, es, rangeAll(t, l, k, 0, 0))
	last, err := l.Last(ctx, k)
	require.NoError(t, err)
	require.Equal(t, es[2].Seq, last.Seq)
	soon(t, sessionsAre(l, "n", 10, k)) // a lost compare-and-swap on an existing log lists nothing more
}

// Appenders racing on the same expected sequence: exactly one wins each round, the others get
// ErrConflict, and the log holds exactly the winners.
func testAppendConcurrent(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	k := key("n", "race")
	const writers, rounds = 6, 15
	var after uint64
	var want []engine.Entry
	for round := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		type result struct {
			seq  uint64
			data []byte
			err  error
		}
		results := make([]result, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				data := []byte(fmt.Sprintf("round %d writer %d", round, w))
				seq, err := l.Append(ctx, k, data, after)
				results[w] = result{seq, data, err}
			}()
		}
		close(start)
		wg.Wait()
		var won []result
		for _, r := range results {
			if r.err == nil {
				won = append(won, r)
				continue
			}
			require.ErrorIs(t, r.err, engine.ErrConflict, "round %d", round)
		}
		require.Len(t, won, 1, "round %d: exactly one writer wins", round)
		require.Greater(t, won[0].seq, after)
		want = append(want, engine.Entry{Seq: won[0].seq, Data: won[0].data})
		after = won[0].seq
	}
	requireEntries(t, want, rangeAll(t, l, k, 0, 0))
	soon(t, sessionsAre(l, "n", 10, k)) // racing creators list the session once
}

// Sequences are never 0 and grow across every log of the store.
func testSequencesGrow(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	keys := []engine.Key{key("n", "a"), key("n", "b"), key("m", "a"), {Namespace: "n", Session: "a", Agent: "other"}}
	afters := make([]uint64, len(keys))
	var prev uint64
	seen := map[uint64]bool{}
	for i := range 20 {
		j := i % len(keys)
		seq, err := l.Append(ctx, keys[j], []byte{byte(i)}, afters[j])
		require.NoError(t, err)
		require.Greater(t, seq, prev, "sequences grow across logs")
		require.False(t, seen[seq])
		seen[seq], prev, afters[j] = true, seq, seq
	}
}

// The log keeps what was appended, not the caller's buffer, and callers may keep what it returns.
func testAppendCopies(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	k := key("n", "s")
	data := []byte("original")
	seq, err := l.Append(ctx, k, data, 0)
	require.NoError(t, err)
	copy(data, "CHANGED!")
	e, err := l.Get(ctx, k, seq)
	require.NoError(t, err)
	require.Equal(t, "original", string(e.Data))
	copy(e.Data, "CHANGED!")
	last, err := l.Last(ctx, k)
	require.NoError(t, err)
	require.Equal(t, "original", string(last.Data))
}

// Last sees every Append that returned before it.
func testLastReadYourWrites(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	k := key("n", "s")
	var after uint64
	for i := range 50 {
		data := []byte(fmt.Sprintf("v%d", i))
		seq, err := l.Append(ctx, k, data, after)
		require.NoError(t, err)
		last, err := l.Last(ctx, k)
		require.NoError(t, err, "Last right after Append %d", i)
		requireEntries(t, []engine.Entry{{Seq: seq, Data: data}}, []engine.Entry{last})
		lasts, err := l.Lasts(ctx, []engine.Key{key("n", "other"), k})
		require.NoError(t, err, "Lasts right after Append %d", i)
		requireEntries(t, []engine.Entry{{}, {Seq: seq, Data: data}}, lasts)
		after = seq
	}
	_, err := l.Last(ctx, key("n", "other"))
	require.ErrorIs(t, err, engine.ErrNotFound)
}

// Get returns an entry of the key's own log only.
func testGet(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	a, b := key("n", "a"), key("n", "b")
	ea := appendN(t, l, a, "a", 3)
	eb := appendN(t, l, b, "b", 2)
	for _, e := range ea {
		got, err := l.Get(ctx, a, e.Seq)
		require.NoError(t, err)
		requireEntries(t, []engine.Entry{e}, []engine.Entry{got})
	}
	for _, seq := range []uint64{0, eb[0].Seq, eb[1].Seq, eb[1].Seq + 1, 1 << 62} {
		_, err := l.Get(ctx, a, seq)
		require.ErrorIs(t, err, engine.ErrNotFound, "seq %d is not an entry of %s", seq, a)
	}
	_, err := l.Get(ctx, key("n", "none"), ea[0].Seq)
	require.ErrorIs(t, err, engine.ErrNotFound)
	require.NoError(t, l.Delete(ctx, a, ea[1].Seq))
	_, err = l.Get(ctx, a, ea[1].Seq)
	require.ErrorIs(t, err, engine.ErrNotFound, "a deleted entry")
}

// Range: [from, upTo] inclusive, upTo 0 to the end, in order, only the key's entries.
func testRangeBounds(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	a, b := key("n", "a"), key("n", "b")
	var ea, eb []engine.Entry
	for i := range 5 { // interleaved with another log, so the sequences have gaps
		ea = append(ea, appendN(t, l, a, fmt.Sprint("a", i), 1)...)
		eb = append(eb, appendN(t, l, b, fmt.Sprint("b", i), 1)...)
	}
	requireEntries(t, ea, rangeAll(t, l, a, 0, 0))
	requireEntries(t, ea, rangeAll(t, l, a, 1, 0))
	requireEntries(t, ea[1:4], rangeAll(t, l, a, ea[1].Seq, ea[3].Seq))
	requireEntries(t, ea[1:4], rangeAll(t, l, a, ea[0].Seq+1, ea[4].Seq-1)) // bounds between entries
	requireEntries(t, ea[2:3], rangeAll(t, l, a, ea[2].Seq, ea[2].Seq))
	requireEntries(t, ea[:1], rangeAll(t, l, a, 0, ea[0].Seq))
	requireEntries(t, nil, rangeAll(t, l, a, ea[4].Seq+1, 0))
	requireEntries(t, nil, rangeAll(t, l, a, ea[3].Seq, ea[2].Seq))
	requireEntries(t, nil, rangeAll(t, l, key("n", "none"), 0, 0))
	requireEntries(t, eb, rangeAll(t, l, b, 0, 0))
	// Deleted entries are skipped.
	require.NoError(t, l.Delete(ctx, a, ea[1].Seq, ea[3].Seq))
	soon(t, rangeIs(l, a, 0, 0, ea[0], ea[2], ea[4]))
	soon(t, rangeIs(l, a, ea[1].Seq, ea[3].Seq, ea[2]))
}

// Range stops at the first entry for which fn returns false.
func testRangeEarlyStop(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	k := key("n", "s")
	es := appendN(t, l, k, "e", 10)
	var got []engine.Entry
	require.NoError(t, l.Range(ctx, k, 0, 0, func(e engine.Entry) bool {
		got = append(got, e)
		return len(got) < 3
	}))
	requireEntries(t, es[:3], got)
	// The log still serves after an abandoned Range.
	requireEntries(t, es, rangeAll(t, l, k, 0, 0))
}

// Range over more entries than a batch holds (1,024 is the largest batch a JetStream server
// answers in one request for multi_last, and the logs' own batch sizes are at most that).
func testRangeManyEntries(t *testing.T, l engine.Log) {
	k := key("n", "many")
	es := appendN(t, l, k, "entry", 1100)
	requireEntries(t, es, rangeAll(t, l, k, 0, 0))
	requireEntries(t, es[100:1050], rangeAll(t, l, k, es[100].Seq, es[1049].Seq))
}

// Range over more bytes than a batch holds (8 MiB).
func testRangeManyBytes(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	k := key("n", "big")
	size := min(l.MaxEntry(), 1<<20)
	n := (9<<20)/size + 1
	var es []engine.Entry
	var after uint64
	for i := range n {
		data := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		seq, err := l.Append(ctx, k, data, after)
		require.NoError(t, err)
		es = append(es, engine.Entry{Seq: seq, Data: data})
		after = seq
	}
	requireEntries(t, es, rangeAll(t, l, k, 0, 0))
	requireEntries(t, es, rangeAll(t, l, k, 0, es[n-1].Seq))
}

// Delete removes the given entries of the key's log; missing ones and other logs' are skipped.
func testDelete(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	a, b := key("n", "a"), key("n", "b")
	ea := appendN(t, l, a, "a", 5)
	eb := appendN(t, l, b, "b", 3)
	require.NoError(t, l.Delete(ctx, a))
	require.NoError(t, l.Delete(ctx, a, ea[0].Seq, ea[2].Seq))
	soon(t, rangeIs(l, a, 0, 0, ea[1], ea[3], ea[4]))
	// Again, with missing sequences, a sequence of b's and one never given out.
	require.NoError(t, l.Delete(ctx, a, ea[0].Seq, ea[2].Seq, eb[0].Seq, eb[1].Seq, 0, 1<<62, ea[1].Seq))
	soon(t, rangeIs(l, a, 0, 0, ea[3], ea[4]))
	requireEntries(t, eb, rangeAll(t, l, b, 0, 0))
	require.NoError(t, l.Delete(ctx, key("n", "none"), eb[0].Seq), "a log that does not exist")
	requireEntries(t, eb, rangeAll(t, l, b, 0, 0))
	// The log goes on after the deletes.
	seq, err := l.Append(ctx, a, []byte("next"), ea[4].Seq)
	require.NoError(t, err)
	require.Greater(t, seq, eb[2].Seq)
}

// Delete refuses the log's last entry, and then deletes nothing.
func testDeleteLast(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	k := key("n", "s")
	es := appendN(t, l, k, "e", 3)
	require.Error(t, l.Delete(ctx, k, es[0].Seq, es[2].Seq))
	requireEntries(t, es, rangeAll(t, l, k, 0, 0))
	require.Error(t, l.Delete(ctx, k, es[2].Seq))
	last, err := l.Last(ctx, k)
	require.NoError(t, err)
	require.Equal(t, es[2].Seq, last.Seq)
	// Its compare-and-swap still holds: the last sequence did not move back.
	_, err = l.Append(ctx, k, []byte("stale"), es[1].Seq)
	require.ErrorIs(t, err, engine.ErrConflict)
}

// Purge removes the whole log and its place in Sessions, and nothing of other logs.
func testPurge(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	a, b, c := key("n", "a"), key("n", "b"), key("n", "c")
	ea := appendN(t, l, a, "a", 4)
	eb := appendN(t, l, b, "b", 2)
	ec := appendN(t, l, c, "c", 2)
	require.NoError(t, l.Delete(ctx, a, ea[0].Seq)) // a purged log may have lost its first entry
	require.NoError(t, l.Purge(ctx, a))
	_, err := l.Last(ctx, a)
	require.ErrorIs(t, err, engine.ErrNotFound)
	_, err = l.Get(ctx, a, ea[2].Seq)
	require.ErrorIs(t, err, engine.ErrNotFound)
	heads, err := l.Lasts(ctx, []engine.Key{a, b})
	require.NoError(t, err)
	require.Zero(t, heads[0].Seq, "Lasts reflects a Purge at once")
	require.Equal(t, eb[1].Seq, heads[1].Seq)
	soon(t, rangeIs(l, a, 0, 0))
	soon(t, sessionsAre(l, "n", 10, b, c))
	requireEntries(t, eb, rangeAll(t, l, b, 0, 0))
	requireEntries(t, ec, rangeAll(t, l, c, 0, 0))
	require.NoError(t, l.Purge(ctx, a), "purging an empty log")
	require.NoError(t, l.Purge(ctx, key("n", "never")), "purging a log that never was")
	soon(t, sessionsAre(l, "n", 10, b, c))
}

// A purged key starts again from an empty log, listed once, after the sessions created before.
func testPurgeRecreate(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	a, b := key("n", "a"), key("n", "b")
	ea := appendN(t, l, a, "a", 3)
	appendN(t, l, b, "b", 1)
	require.NoError(t, l.Purge(ctx, a))
	_, err := l.Append(ctx, a, []byte("stale"), ea[2].Seq)
	require.ErrorIs(t, err, engine.ErrConflict, "a purged log is empty: it takes after 0 only")
	for round := range 3 { // again and again, quickly
		seq, err := l.Append(ctx, a, []byte("again"), 0)
		require.NoError(t, err)
		require.Greater(t, seq, ea[2].Seq)
		soon(t, rangeIs(l, a, 0, 0, engine.Entry{Seq: seq, Data: []byte("again")}))
		soon(t, sessionsAre(l, "n", 10, b, a))
		if round < 2 {
			require.NoError(t, l.Purge(ctx, a))
			soon(t, sessionsAre(l, "n", 10, b))
		}
	}
}

// Sessions pages a namespace in the order its logs were created, with a cursor.
func testSessionsPaging(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	var want []engine.Key
	for i := range 23 {
		k := key("n", fmt.Sprintf("s%02d", 22-i)) // creation order is not name order
		appendN(t, l, k, "e", 1+i%3)
		want = append(want, k)
		appendN(t, l, key("other", fmt.Sprint(i)), "o", 1)
	}
	for _, limit := range []int{1, 5, 10, 23, 24, 1000} {
		require.Equal(t, want, allSessions(t, l, "n", limit), "limit %d", limit)
	}
	keys, next, err := l.Sessions(ctx, "n", 0, 23)
	require.NoError(t, err)
	require.Equal(t, want, keys)
	require.Zero(t, next, "no more")
	keys, next, err = l.Sessions(ctx, "empty", 0, 10)
	require.NoError(t, err)
	require.Empty(t, keys)
	require.Zero(t, next)
	_, _, err = l.Sessions(ctx, "n", 0, 0)
	require.Error(t, err, "a page of 0 keys is refused")
	_, _, err = l.Sessions(ctx, "n", 0, -1)
	require.Error(t, err)
	// A page cursor stays valid while sessions are created after it.
	keys, next, err = l.Sessions(ctx, "n", 0, 20)
	require.NoError(t, err)
	require.Equal(t, want[:20], keys)
	late := key("n", "late")
	appendN(t, l, late, "e", 1)
	rest := append(slices.Clone(want[20:]), late)
	var got []engine.Key
	for next != 0 {
		keys, next, err = l.Sessions(ctx, "n", next, 20)
		require.NoError(t, err)
		got = append(got, keys...)
	}
	require.Equal(t, rest, got)
}

// More sessions than the largest page a store may answer (1,024), listed with a larger limit:
// split into pages (fewer keys and a cursor) or all at once, never truncated without a cursor.
func testSessionsLargeLimit(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	const n = 1100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if _, err := l.Append(ctx, key("big", fmt.Sprintf("s%04d", i)), []byte("e"), 0); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	keys := allSessions(t, l, "big", 5000)
	require.Len(t, keys, n)
	seen := map[engine.Key]bool{}
	for _, k := range keys {
		require.False(t, seen[k], "%s listed twice", k)
		seen[k] = true
	}
	for i := range n {
		require.True(t, seen[key("big", fmt.Sprintf("s%04d", i))], "s%04d listed", i)
	}
}

// Creators racing on a new key: one log, listed once; the losers' attempts leave nothing.
func testSessionsConcurrentCreation(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	var want []engine.Key
	for i := range 10 {
		k := key("n", fmt.Sprint("race", i))
		want = append(want, k)
		var wg sync.WaitGroup
		start := make(chan struct{})
		var won, lost int
		var mu sync.Mutex
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := l.Append(ctx, k, []byte("first"), 0)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					won++
				} else if errors.Is(err, engine.ErrConflict) {
					lost++
				} else {
					t.Errorf("creating %s: %v", k, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Equal(t, 1, won)
		require.Equal(t, 3, lost)
	}
	soon(t, sessionsAre(l, "n", 100, want...))
}

// A creation begun (engine.Create: the log's own Creator, or a plain Append) and appended is the
// log's first Append: the entry stored, the key listed once.
func testCreateAppended(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	k := key("n", "created")
	c := engine.Create(ctx, l, k)
	seq, err := c.Append(ctx, []byte("first"))
	require.NoError(t, err)
	require.NotZero(t, seq)
	requireEntries(t, []engine.Entry{{Seq: seq, Data: []byte("first")}}, rangeAll(t, l, k, 0, 0))
	soon(t, sessionsAre(l, "n", 10, k))
	appendN(t, l, k, "then", 2)
	soon(t, sessionsAre(l, "n", 10, k))
}

// A creation abandoned (its save refused) leaves nothing: no entry, no listing, for a key that
// has none and beside one that has; the key can be created after it, listed once.
func testCreateAbandoned(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	other, k := key("n", "other"), key("n", "refused")
	appendN(t, l, other, "e", 1)
	for range 3 {
		require.NoError(t, engine.Create(ctx, l, k).Abandon(ctx))
	}
	_, err := l.Last(ctx, k)
	require.ErrorIs(t, err, engine.ErrNotFound, "an abandoned creation wrote no entry")
	soon(t, sessionsAre(l, "n", 10, other))
	seq, err := engine.Create(ctx, l, k).Append(ctx, []byte("now"))
	require.NoError(t, err)
	requireEntries(t, []engine.Entry{{Seq: seq, Data: []byte("now")}}, rangeAll(t, l, k, 0, 0))
	soon(t, sessionsAre(l, "n", 10, other, k))
}

// A creation of a log that has entries (another writer created it) is a lost compare-and-swap,
// as Append after 0 is: nothing written, the key still listed once.
func testCreateExisting(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	k := key("n", "exists")
	want := appendN(t, l, k, "e", 2)
	_, err := engine.Create(ctx, l, k).Append(ctx, []byte("again"))
	require.ErrorIs(t, err, engine.ErrConflict)
	requireEntries(t, want, rangeAll(t, l, k, 0, 0))
	soon(t, sessionsAre(l, "n", 10, k))
}

// Creations racing on one new key, begun at once and appended at once: one wins, the others lose
// their compare-and-swap, and the key is listed once.
func testCreateRacing(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	k := key("n", "race")
	creations := make([]engine.Creation, 4)
	for i := range creations {
		creations[i] = engine.Create(ctx, l, k)
	}
	errs := make([]error, len(creations))
	var wg sync.WaitGroup
	for i, c := range creations {
		wg.Go(func() { _, errs[i] = c.Append(ctx, []byte(fmt.Sprint("creation ", i))) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else {
			require.ErrorIs(t, err, engine.ErrConflict)
		}
	}
	require.Equal(t, 1, won)
	require.Len(t, rangeAll(t, l, k, 0, 0), 1)
	soon(t, sessionsAre(l, "n", 10, k))
}

// Namespaces lists every namespace with a session, sorted, each once.
func testNamespaces(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	nss, err := l.Namespaces(ctx)
	require.NoError(t, err)
	require.Empty(t, nss)
	for _, ns := range []string{"zeta", "alpha", "Mid", "alpha", "zeta", "b.c", "b"} {
		appendN(t, l, key(ns, fmt.Sprint("s", time.Now().UnixNano())), "e", 1)
	}
	require.NoError(t, l.PutValue(ctx, "values-only", "id", []byte("v")))
	nss, err = l.Namespaces(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"Mid", "alpha", "b", "b.c", "values-only", "zeta"}, nss, "a namespace with values only is listed")
}

// Namespaces after every session of a namespace was purged: still listed while it holds a value
// (a sweep of values must visit it); without values, it may be listed or not.
func testNamespacesAfterPurge(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	kept, gone := key("kept", "s"), key("gone", "s")
	appendN(t, l, kept, "e", 2)
	appendN(t, l, gone, "e", 2)
	require.NoError(t, l.PutValue(ctx, "kept", strings.Repeat("ab", 32), []byte("a value")))
	require.NoError(t, l.Purge(ctx, kept))
	require.NoError(t, l.Purge(ctx, gone))
	soon(t, sessionsAre(l, "kept", 10))
	nss, err := l.Namespaces(ctx)
	require.NoError(t, err)
	require.Contains(t, nss, "kept", "a namespace whose sessions were purged and that holds a value")
	require.Subset(t, []string{"gone", "kept"}, nss, "nothing else")
	require.True(t, slices.IsSorted(nss))
	// Its listing may still name the purged key for a moment on a replicated store (a replica
	// that has not applied the index entry's delete), but its log is empty at once.
	keys, _, err := l.Sessions(ctx, "gone", 0, 10)
	require.NoError(t, err)
	require.Subset(t, []engine.Key{gone}, keys)
	heads, err := l.Lasts(ctx, keys)
	require.NoError(t, err)
	for i, h := range heads {
		require.Zero(t, h.Seq, "a namespace listed without sessions has no log with entries: %s", keys[i])
	}
	// And the listing itself is empty once the purge reached every replica (as
	// kept's above: Sessions may list a purged log for a moment on a replicated store).
	soon(t, sessionsAre(l, "gone", 10))
}

// Values: created once (a second PutValue keeps the first), read, listed, deleted.
func testValues(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	id1, id2 := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	_, err := l.Value(ctx, "n", id1)
	require.ErrorIs(t, err, engine.ErrNotFound)
	require.NoError(t, l.PutValue(ctx, "n", id1, []byte("first")))
	require.NoError(t, l.PutValue(ctx, "n", id1, []byte("second")), "a second writer gets nil")
	v, err := l.Value(ctx, "n", id1)
	require.NoError(t, err)
	require.Equal(t, "first", string(v), "the first value is kept")
	require.NoError(t, l.PutValue(ctx, "n", id2, nil))
	v, err = l.Value(ctx, "n", id2)
	require.NoError(t, err, "an empty value is a value")
	require.Empty(t, v)
	require.NoError(t, l.PutValue(ctx, "m", id1, []byte("other namespace")))
	v, err = l.Value(ctx, "m", id1)
	require.NoError(t, err)
	require.Equal(t, "other namespace", string(v))

	values := func(ns string) []string {
		var ids []string
		require.NoError(t, l.Values(ctx, ns, func(id string) bool { ids = append(ids, id); return true }))
		slices.Sort(ids)
		return ids
	}
	require.Equal(t, []string{id1, id2}, values("n"))
	require.Equal(t, []string{id1}, values("m"))
	require.Empty(t, values("none"))
	calls := 0
	require.NoError(t, l.Values(ctx, "n", func(string) bool { calls++; return false }))
	require.Equal(t, 1, calls, "Values stops when fn returns false")

	require.NoError(t, l.DeleteValue(ctx, "n", id1))
	_, err = l.Value(ctx, "n", id1)
	require.ErrorIs(t, err, engine.ErrNotFound)
	require.NoError(t, l.DeleteValue(ctx, "n", id1), "deleting a missing value")
	require.Equal(t, []string{id2}, values("n"))
	v, err = l.Value(ctx, "m", id1)
	require.NoError(t, err, "a delete in one namespace leaves the others")
	require.Equal(t, "other namespace", string(v))
	require.NoError(t, l.PutValue(ctx, "n", id1, []byte("again")), "a deleted value can be created again")
	v, err = l.Value(ctx, "n", id1)
	require.NoError(t, err)
	require.Equal(t, "again", string(v))
}

// Entries and values of MaxEntry bytes are stored; one byte more is ErrTooLarge, and nothing is
// written.
func testMaxEntry(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	max := l.MaxEntry()
	require.Greater(t, max, 0)
	long := strings.Repeat("=.>* ", 51) // 255 bytes, each escaped: the longest subject there is
	k := engine.Key{Namespace: long, Session: long, Agent: long}
	_, err := l.Append(ctx, k, make([]byte, max+1), 0)
	require.ErrorIs(t, err, engine.ErrTooLarge)
	_, err = l.Last(ctx, k)
	require.ErrorIs(t, err, engine.ErrNotFound)
	keys, _, err := l.Sessions(ctx, long, 0, 10)
	require.NoError(t, err)
	require.Empty(t, keys, "a refused entry does not list the session")

	big := bytes.Repeat([]byte("x"), max)
	seq, err := l.Append(ctx, k, big, 0)
	require.NoError(t, err)
	seq, err = l.Append(ctx, k, big, seq)
	require.NoError(t, err, "an entry of MaxEntry bytes after the first")
	last, err := l.Last(ctx, k)
	require.NoError(t, err)
	require.Equal(t, seq, last.Seq)
	require.True(t, bytes.Equal(big, last.Data))

	id := strings.Repeat("ef", 32)
	require.ErrorIs(t, l.PutValue(ctx, long, id, make([]byte, max+1)), engine.ErrTooLarge)
	_, err = l.Value(ctx, long, id)
	require.ErrorIs(t, err, engine.ErrNotFound)
	require.NoError(t, l.PutValue(ctx, long, id, big))
	v, err := l.Value(ctx, long, id)
	require.NoError(t, err)
	require.True(t, bytes.Equal(big, v))
}

// hostileIDs are ids a client may choose, meant to change a subject's meaning if they reached it
// raw: separators, wildcards, spaces, escapes that look like encoded bytes, unicode, 256 bytes.
var hostileIDs = []string{
	"a", "a.b", "a.b.c", ".", "..", "*", ">", "a.*", "a.>", " ", "a b", "\t", "=", "=2E", "=2E=2E", "a=2Eb",
	"ü", "日本", "🙂", "$JS", "_INBOX", "%2E", "A", // "A" and "a" are different ids
	strings.Repeat("x", 256), strings.Repeat(".", 256), strings.Repeat("é", 128),
}

// Keys and values named by hostile ids each stay their own: an entry, a listing, a value of one
// is never another's.
func testHostileIDs(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	type kv struct {
		k    engine.Key
		data []byte
		seq  uint64
	}
	var all []*kv
	byNS := map[string][]engine.Key{}
	n := len(hostileIDs)
	for i, id := range hostileIDs {
		// Each id as namespace, session and agent, beside its neighbours in the list.
		for _, k := range []engine.Key{
			{Namespace: id, Session: "s", Agent: "main"},
			{Namespace: "n", Session: id, Agent: "main"},
			{Namespace: "n", Session: "s", Agent: id},
			{Namespace: id, Session: hostileIDs[(i+1)%n], Agent: hostileIDs[(i+2)%n]},
		} {
			if slices.ContainsFunc(all, func(o *kv) bool { return o.k == k }) {
				continue
			}
			e := &kv{k: k, data: []byte(fmt.Sprintf("%q/%q/%q", k.Namespace, k.Session, k.Agent))}
			seq, err := l.Append(ctx, k, e.data, 0)
			require.NoError(t, err, "creating %q", k)
			e.seq = seq
			all = append(all, e)
			byNS[k.Namespace] = append(byNS[k.Namespace], k)
		}
	}
	for _, e := range all {
		last, err := l.Last(ctx, e.k)
		require.NoError(t, err, "%q", e.k)
		require.Equal(t, string(e.data), string(last.Data), "%q reads its own entry", e.k)
		requireEntries(t, []engine.Entry{{Seq: e.seq, Data: e.data}}, rangeAll(t, l, e.k, 0, 0))
	}
	keys := make([]engine.Key, len(all))
	for i, e := range all {
		keys[i] = e.k
	}
	lasts, err := l.Lasts(ctx, keys)
	require.NoError(t, err)
	require.Len(t, lasts, len(all))
	for i, e := range all {
		requireEntries(t, []engine.Entry{{Seq: e.seq, Data: e.data}}, lasts[i:i+1])
	}
	for ns, want := range byNS {
		require.Equal(t, want, allSessions(t, l, ns, 7), "namespace %q lists its own sessions", ns)
	}
	nss, err := l.Namespaces(ctx)
	require.NoError(t, err)
	var want []string
	for ns := range byNS {
		want = append(want, ns)
	}
	slices.Sort(want)
	require.Equal(t, want, nss)

	// Values named by hostile ids, in hostile namespaces.
	for i, id := range hostileIDs {
		require.NoError(t, l.PutValue(ctx, hostileIDs[(i+3)%n], id, []byte(fmt.Sprint("value ", i))))
	}
	for i, id := range hostileIDs {
		v, err := l.Value(ctx, hostileIDs[(i+3)%n], id)
		require.NoError(t, err, "value %q", id)
		require.Equal(t, fmt.Sprint("value ", i), string(v))
		var ids []string
		require.NoError(t, l.Values(ctx, hostileIDs[(i+3)%n], func(id string) bool { ids = append(ids, id); return true }))
		require.Equal(t, []string{id}, ids, "namespace %q holds one value", hostileIDs[(i+3)%n])
	}

	// Deleting and purging by a wildcard-looking id touches nothing else.
	for _, id := range []string{"*", ">", "a.>"} {
		require.NoError(t, l.Purge(ctx, engine.Key{Namespace: "n", Session: id, Agent: "main"}))
		require.NoError(t, l.DeleteValue(ctx, hostileIDs[(slices.Index(hostileIDs, id)+3)%n], id))
	}
	for _, e := range all {
		_, err := l.Last(ctx, e.k)
		if e.k.Namespace == "n" && e.k.Agent == "main" && slices.Contains([]string{"*", ">", "a.>"}, e.k.Session) {
			require.ErrorIs(t, err, engine.ErrNotFound, "%q was purged", e.k)
			continue
		}
		require.NoError(t, err, "%q survives purging the wildcard-looking ids", e.k)
	}
	for i, id := range hostileIDs {
		_, err := l.Value(ctx, hostileIDs[(i+3)%n], id)
		if slices.Contains([]string{"*", ">", "a.>"}, id) {
			require.ErrorIs(t, err, engine.ErrNotFound)
			continue
		}
		require.NoError(t, err, "value %q survives", id)
	}
}

// A creation the store refuses for another reason than a lost compare-and-swap (here a full
// store), tried again once there is room: the session is created once and listed once; the
// refusal left nothing (no entry, no listing).
func testRefusedCreationRetried(t *testing.T, l engine.Log, opts Options) {
	if opts.Fill == nil {
		t.Skip("the store's test gives no Fill")
	}
	ctx := ctxOf(t)
	first, k := key("n", "first"), key("n", "refused")
	appendN(t, l, first, "e", 1)
	size := min(l.MaxEntry(), 256<<10)
	unfill := opts.Fill(t, l, size/2)
	_, err := l.Append(ctx, k, make([]byte, size), 0)
	require.Error(t, err, "the store is full")
	require.NotErrorIs(t, err, engine.ErrConflict, "a refusal is not a lost compare-and-swap")
	unfill()
	_, err = l.Last(ctx, k)
	require.ErrorIs(t, err, engine.ErrNotFound, "a refused creation wrote nothing")
	soon(t, sessionsAre(l, "n", 10, first))
	seq, err := l.Append(ctx, k, []byte("again"), 0)
	require.NoError(t, err)
	requireEntries(t, []engine.Entry{{Seq: seq, Data: []byte("again")}}, rangeAll(t, l, k, 0, 0))
	for _, limit := range []int{1, 10} {
		soon(t, sessionsAre(l, "n", limit, first, k))
	}
}

// Every read through one Log sees every write acknowledged through another on the same store
// (two daemons; on a cluster, on two nodes), in both directions, at once.
// Moved says whether a log has an entry after a sequence: entries of other logs do not count.
func testMoved(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	a, b := key("n", "a"), key("n", "b")
	moved := func(k engine.Key, seq uint64) bool {
		t.Helper()
		m, err := l.Moved(ctx, k, seq)
		require.NoError(t, err)
		return m
	}
	require.False(t, moved(a, 0), "an empty log")
	first := appendN(t, l, a, "a", 1)[0].Seq
	other := appendN(t, l, b, "b", 1)[0].Seq
	require.True(t, moved(a, 0))
	require.True(t, moved(a, first-1))
	require.False(t, moved(a, first), "only another log's entry after it")
	require.False(t, moved(a, other))
	next, err := l.Append(ctx, a, []byte("a-1"), first)
	require.NoError(t, err)
	require.True(t, moved(a, first))
	require.True(t, moved(a, other))
	require.False(t, moved(a, next))
	require.False(t, moved(b, other))
}

func testReadYourWritesAcrossLogs(t *testing.T, l engine.Log, opts Options) {
	ctx := ctxOf(t)
	other := opts.Other(t, l)
	k := key("n", "shared")
	logs := []engine.Log{l, other}
	var after uint64
	var want []engine.Entry
	for i := range 20 {
		w, r := logs[i%2], logs[(i+1)%2]
		data := []byte(fmt.Sprint("entry ", i))
		seq, err := w.Append(ctx, k, data, after)
		require.NoError(t, err, "append %d", i)
		want = append(want, engine.Entry{Seq: seq, Data: data})
		after = seq
		last, err := r.Last(ctx, k)
		require.NoError(t, err, "Last through the other log after append %d", i)
		requireEntries(t, want[i:], []engine.Entry{last})
		e, err := r.Get(ctx, k, seq)
		require.NoError(t, err)
		requireEntries(t, want[i:], []engine.Entry{e})
		moved, err := r.Moved(ctx, k, seq)
		require.NoError(t, err)
		require.False(t, moved, "Moved after the last entry, through the other log, after append %d", i)
		moved, err = r.Moved(ctx, k, seq-1)
		require.NoError(t, err)
		require.True(t, moved, "Moved before the entry appended through the other log, append %d", i)
		lasts, err := r.Lasts(ctx, []engine.Key{k})
		require.NoError(t, err, "Lasts through the other log after append %d", i)
		requireEntries(t, want[i:], lasts)
		requireEntries(t, want, rangeAll(t, r, k, 0, 0))
		keys, _, err := r.Sessions(ctx, "n", 0, 10)
		require.NoError(t, err)
		require.Equal(t, []engine.Key{k}, keys)
		id := fmt.Sprintf("%064x", i)
		require.NoError(t, w.PutValue(ctx, "n", id, data))
		v, err := r.Value(ctx, "n", id)
		require.NoError(t, err, "Value through the other log")
		require.Equal(t, data, v)
	}
	_, err := other.Append(ctx, k, []byte("stale"), want[len(want)-2].Seq)
	require.ErrorIs(t, err, engine.ErrConflict, "the compare-and-swap holds across the two")
}

// A Purge racing a creation of the same key: whichever comes first, a key whose log has entries
// is listed (once), and a purged key's log is empty. Run many times, with the Purge started
// at different points of the creation.
func testPurgeRacingCreation(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	var exist []engine.Key
	for round := range 30 {
		k := key("n", fmt.Sprint("race", round))
		var wg sync.WaitGroup
		start := make(chan struct{})
		var appendErr, purgeErr error
		wg.Add(2)
		// One or the other starts a little later, by 0 to 1 ms, so that the Purge lands at
		// different points of the creation.
		delay := time.Duration(round%10) * 100 * time.Microsecond
		go func() {
			defer wg.Done()
			<-start
			if round%2 == 0 {
				time.Sleep(delay)
			}
			_, appendErr = l.Append(ctx, k, []byte("first"), 0)
		}()
		go func() {
			defer wg.Done()
			<-start
			if round%2 == 1 {
				time.Sleep(delay)
			}
			purgeErr = l.Purge(ctx, k)
		}()
		close(start)
		wg.Wait()
		require.NoError(t, appendErr, "round %d", round)
		require.NoError(t, purgeErr, "round %d", round)
		if _, err := l.Last(ctx, k); err == nil {
			exist = append(exist, k)
		} else {
			require.ErrorIs(t, err, engine.ErrNotFound)
		}
	}
	// Every key with entries is listed once; others may be listed (a Purge keeps a young index
	// entry of an empty log: it may be a creation under way), and have an empty log.
	soon(t, func() error {
		listed := map[engine.Key]int{}
		for _, k := range allSessions(t, l, "n", 7) {
			listed[k]++
		}
		for _, k := range exist {
			if listed[k] != 1 {
				return fmt.Errorf("%s has entries and is listed %d times", k, listed[k])
			}
		}
		return nil
	})
	t.Logf("%d of 30 creations came after their purge", len(exist))
}

// lastsAre reports how Lasts of keys differs from want (Seq 0: an empty log).
func lastsAre(l engine.Log, keys []engine.Key, want ...engine.Entry) func() error {
	return func() error {
		got, err := l.Lasts(context.Background(), keys)
		if err != nil {
			return err
		}
		if !slices.EqualFunc(want, got, func(a, b engine.Entry) bool { return a.Seq == b.Seq && bytes.Equal(a.Data, b.Data) }) {
			return fmt.Errorf("Lasts: got %v, want %v", seqsOf(got), seqsOf(want))
		}
		return nil
	}
}

// Lasts returns each key's last entry in the order of the keys, whatever their namespaces: Seq 0
// for a log that is empty (never written, purged), the same entry for a key given twice.
func testLastsOrder(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	got, err := l.Lasts(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got, "no keys, no entries")
	a, b, c := key("n", "a"), key("m", "b"), engine.Key{Namespace: "n", Session: "a", Agent: "other"}
	ea := appendN(t, l, a, "a", 3)
	eb := appendN(t, l, b, "b", 1)
	ec := appendN(t, l, c, "c", 2)
	none, purged := key("n", "none"), key("m", "purged")
	appendN(t, l, purged, "p", 2)
	require.NoError(t, l.Purge(ctx, purged))
	keys := []engine.Key{c, none, b, a, purged, b, key("n", "b")} // key("n", "b") is not m's b
	want := []engine.Entry{ec[1], {}, eb[0], ea[2], {}, eb[0], {}}
	soon(t, lastsAre(l, keys, want...))
	// A log that moved on is read at its new last entry.
	ea = append(ea, engine.Entry{Data: []byte("a-next")})
	ea[3].Seq, err = l.Append(ctx, a, ea[3].Data, ea[2].Seq)
	require.NoError(t, err)
	want[3] = ea[3]
	got, err = l.Lasts(ctx, keys)
	require.NoError(t, err)
	requireEntries(t, want, got)
	// The caller may keep and change what it got.
	copy(got[3].Data, "CHANGED")
	again, err := l.Lasts(ctx, keys)
	require.NoError(t, err)
	requireEntries(t, want, again)
}

// Lasts of more keys than one request of a store names (JetStream: 1,024 subjects, and a request
// of at most max_payload bytes, which 800 keys of the longest ids exceed), keys of four namespaces
// mixed, some with empty logs; and of last entries of more bytes than one reply holds (8 MiB).
func testLastsMany(t *testing.T, l engine.Log) {
	ctx := ctxOf(t)
	const short, n = 1100, 1900      // 1,100 keys of short ids, then 800 of long ones
	long := strings.Repeat(".", 240) // each "." is escaped in a subject: ~720 bytes
	keyOf := func(i int) engine.Key {
		ns, session := "a", fmt.Sprint("s", i)
		if i >= short {
			ns, session = long+"a", fmt.Sprintf("%s%05d", long, i)
		}
		if i%3 == 0 {
			ns += "b"
		}
		return engine.Key{Namespace: ns, Session: session, Agent: "main"}
	}
	seqs := make([]uint64, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				seq, err := l.Append(ctx, keyOf(i), []byte(fmt.Sprint("head ", i)), 0)
				if err != nil {
					errs <- err
				}
				seqs[i] = seq
			}
		}()
	}
	for i := range n {
		if i%11 != 5 { // every 11th log stays empty
			work <- i
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	keys := make([]engine.Key, n)
	at := make([]int, n) // keys[i] is keyOf(at[i])
	for i := range n {
		at[i] = short - 1 - i // the short ones first, not in creation order
		if i >= short {
			at[i] = i
		}
		keys[i] = keyOf(at[i])
	}
	got, err := l.Lasts(ctx, keys)
	require.NoError(t, err)
	require.Len(t, got, n)
	for i, k := range keys {
		j := at[i]
		if j%11 == 5 {
			require.Zero(t, got[i].Seq, "%d: %s has an empty log", i, k)
			continue
		}
		requireEntries(t, []engine.Entry{{Seq: seqs[j], Data: []byte(fmt.Sprint("head ", j))}}, got[i:i+1])
	}

	// Last entries of more bytes than a reply holds.
	size := min(l.MaxEntry(), 1<<20)
	big := make([]engine.Key, (9<<20)/size+2)
	want := make([]engine.Entry, len(big))
	for i := range big {
		big[i] = key("big", fmt.Sprint(i))
		data := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		seq, err := l.Append(ctx, big[i], data, 0)
		require.NoError(t, err)
		want[i] = engine.Entry{Seq: seq, Data: data}
	}
	got, err = l.Lasts(ctx, append(big, keys[:3]...))
	require.NoError(t, err)
	requireEntries(t, want, got[:len(big)])
}
