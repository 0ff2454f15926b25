package logstore_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
)

// A history cursor's pack hint is the client's to send (docs/protocol.md §8): whatever sequence
// it names, another session's pack or save, another namespace's, this session's entry that is no
// pack, a pack that does not hold the cursor's version, or none at all, the page is the one the
// cursor's version alone gives: never another session's records, never a version skipped or
// repeated. Two sessions of two namespaces saved in turns (single saves and groups) on one
// JetStream log, with small packs, so that their packs and saves interleave in the stream.
func TestEngine_ForgedHistoryHintsGiveTheTruePage(t *testing.T) {
	e, _ := startEngine(t, engine.Config{PackEntries: 4})
	a := engine.Key{Namespace: "n", Session: "a", Agent: "x"}
	b := engine.Key{Namespace: "m", Session: "b", Agent: "x"}
	heads := map[engine.Key]uint64{}
	save := func(k engine.Key, n int) {
		t.Helper()
		var reqs []engine.SaveRequest
		for j := range n {
			v := heads[k] + uint64(j)
			reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(k.Session, v+1), Base: enginetest.U64(v),
				Payload: enginetest.Array(int(v), int(v)+1), Now: now})
		}
		for i, r := range e.SaveGroup(ctx, reqs) {
			require.NoError(t, r.Err, "%s save %d", k, i)
			if r.Saved.PackDue {
				_, err := e.Pack(ctx, k, false)
				require.NoError(t, err)
			}
		}
		heads[k] += uint64(n)
	}
	for i := range 24 {
		save(a, 1+i%3)
		save(b, 1+(i+1)%3)
	}
	truth, err := e.History(ctx, a)
	require.NoError(t, err)
	require.Len(t, truth, int(heads[a]))
	// The stream holds both sessions' entries: fewer than 4 per version saved.
	maxSeq := 4 * (heads[a] + heads[b])
	for _, before := range []uint64{heads[a], heads[a] - 3, heads[a] / 2, 6, 2} {
		for seq := uint64(1); seq <= maxSeq; seq++ {
			recs, next, err := e.HistoryPage(ctx, a, engine.HistoryCursor{Before: before, Pack: seq}, 5)
			require.NoError(t, err, "before %d, pack %d", before, seq)
			want := min(5, int(before-1))
			require.Len(t, recs, want, "before %d, pack %d", before, seq)
			for i, r := range recs {
				require.Equal(t, truth[int(before)-2-i], r, "before %d, pack %d", before, seq)
			}
			if before-1 > 5 {
				require.Equal(t, before-5, next.Before, "before %d, pack %d", before, seq)
			}
		}
	}
}
