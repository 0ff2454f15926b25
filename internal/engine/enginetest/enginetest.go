// Package enginetest holds what the engine's tests share, on memlog (internal/engine) and on the
// JetStream log (internal/logstore): conversations to save, saving them turn by turn, checking
// every version and the history, and the history conformance scenarios (RunHistory).
package enginetest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

var ctx = context.Background()

// Now is the time the helpers save at.
var Now = time.Date(2026, 11, 24, 1, 0, 0, 123456789, time.UTC)

// Message is a canonical message whose text names i, a little repetitive, as conversations are.
func Message(i int) []byte {
	role := []string{"user", "assistant"}[i%2]
	return []byte(fmt.Sprintf(`{"role":%q,"content":[{"type":"text","text":"turn %d: %s"}]}`, role, i,
		strings.Repeat("the quick brown fox ", 1+i%7)))
}

// Conversation is the JSON array of the first n messages.
func Conversation(n int) []byte { return Array(0, n) }

// Array is the JSON array of messages from..to-1.
func Array(from, to int) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := from; i < to; i++ {
		if i > from {
			b.WriteByte(',')
		}
		b.Write(Message(i))
	}
	b.WriteByte(']')
	return b.Bytes()
}

// U64 is a pointer to v.
func U64(v uint64) *uint64 { return &v }

// SaveTurns saves messages from..to-1 two at a time as appends (Base), with the writer's lease
// epoch (0: none), packing when due as the daemon does after answering: version v holds the
// first 2v messages.
func SaveTurns(t testing.TB, e *engine.Engine, k engine.Key, from, to int, epoch uint64) {
	t.Helper()
	for i := from; i < to; i += 2 {
		end := min(i+2, to)
		saved, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("save-%d", i), Base: U64(uint64(i / 2)),
			Payload: Array(i, end), Epoch: epoch, Now: Now})
		require.NoError(t, err, "saving messages from %d", i)
		require.False(t, saved.Duplicate)
		require.Equal(t, uint64(i/2+1), saved.Record.Version)
		if saved.PackDue {
			_, err = e.Pack(ctx, k, false)
			require.NoError(t, err, "packing after the save of message %d", i)
		}
	}
}

// CheckVersions reads the head and a spread of old versions (version v holds 2v messages, as
// SaveTurns saves them), with their hashes, and checks the history (CheckHistory).
func CheckVersions(t testing.TB, e *engine.Engine, k engine.Key, versions int) {
	t.Helper()
	got, rec, err := e.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, uint64(versions), rec.Version)
	require.Equal(t, string(Conversation(2*versions)), string(got))
	for _, v := range []int{1, 2, 3, versions / 3, versions / 2, versions - 1} {
		if v < 1 {
			continue
		}
		got, rec, err := e.Read(ctx, k, uint64(v), engine.ReadOptions{Verify: true})
		require.NoError(t, err, "version %d", v)
		require.Equal(t, uint64(v), rec.Version)
		require.Equal(t, string(Conversation(2*v)), string(got), "version %d", v)
	}
	CheckHistory(t, e, k, 1, uint64(versions))
}

// Entries counts the entries of k's log.
func Entries(t testing.TB, l engine.Log, k engine.Key) int {
	t.Helper()
	n := 0
	require.NoError(t, l.Range(ctx, k, 0, 0, func(engine.Entry) bool { n++; return true }))
	return n
}

// EntriesGone waits until k's log holds want entries, the entries a Delete removed no longer seen
// (up to 10 s). On a replicated stream a Range may be answered by a replica that has not yet
// applied deletes the leader acknowledged (engine.Log.Range); readers skip such entries, and a
// count taken at once may include them.
func EntriesGone(t testing.TB, l engine.Log, k engine.Key, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n := Entries(t, l, k); n != want; n = Entries(t, l, k) {
		require.True(t, n > want && time.Now().Before(deadline), "%s holds %d entries, want %d", k, n, want)
		time.Sleep(20 * time.Millisecond)
	}
}

// CheckHistory checks that k's versions are first..head, each once: History oldest first;
// HistoryPage newest first, paged with several limits (so walks by back pointer, by the tail,
// across packs and from a cursor all take part): small pages over the newest 40 versions, larger
// ones down to the first; and Version of the newest ones. A walk that skipped or repeated a
// version, or went past the first kept, fails it.
func CheckHistory(t testing.TB, e *engine.Engine, k engine.Key, first, head uint64) {
	t.Helper()
	all, err := e.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, all, int(head-first+1), "History of %s", k)
	for i, r := range all {
		require.Equal(t, first+uint64(i), r.Version, "History of %s", k)
		require.Equal(t, k, r.Key)
	}
	for _, limit := range []int{1, 3, 10, 64, 1000} {
		want := len(all)
		if limit < 64 {
			want = min(want, 40) // (paging a long history by 1 from the head would take long)
		}
		var cur engine.HistoryCursor
		var got []engine.Record
		for pages := 0; len(got) < want; pages++ {
			require.Less(t, pages, len(all)+1, "HistoryPage of %s by %d never ends", k, limit)
			recs, next, err := e.HistoryPage(ctx, k, cur, limit)
			require.NoError(t, err, "HistoryPage of %s by %d from %+v", k, limit, cur)
			require.LessOrEqual(t, len(recs), limit)
			got = append(got, recs...)
			if next == (engine.HistoryCursor{}) {
				require.Len(t, got, len(all), "HistoryPage of %s by %d ends at the first version", k, limit)
				break
			}
			require.Len(t, recs, limit, "a page of %s that is not the last is full", k)
			cur = next
		}
		require.GreaterOrEqual(t, len(got), want, "HistoryPage of %s by %d", k, limit)
		for i, r := range got {
			require.Equal(t, all[len(all)-1-i], r, "HistoryPage of %s by %d, record %d", k, limit, i)
		}
	}
	for v := head; v >= first && v+12 > head; v-- {
		r, err := e.Version(ctx, k, v)
		require.NoError(t, err, "Version %d of %s", v, k)
		require.Equal(t, all[v-first], r, "Version %d of %s", v, k)
	}
}
