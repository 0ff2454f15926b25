package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// appendCounter is a memlog that counts the bytes of every entry appended: on a one-session
// JetStream store, what the engine appends is what stays on disk (docs/format.md §8.8).
type appendCounter struct {
	*memlog.Log
	appended int
	entries  int
}

func (l *appendCounter) Append(ctx context.Context, key engine.Key, data []byte, after uint64) (uint64, error) {
	seq, err := l.Log.Append(ctx, key, data, after)
	if err == nil {
		l.appended += len(data)
		l.entries++
	}
	return seq, err
}

// The corpus saved after every assistant turn (485 saves, each an append of what grew, with the
// save ids, writer and reason the SDK writes, packed by the default policy), as checkpointbench
// --only disk saves it through the daemon. On such a store every entry appended stays on disk
// (the active block is never compacted), so the bytes appended are the data directory less
// JetStream's own: they must not grow back. Budget: 603,259 B since s19-disk (delta-coded pack
// records; 613,352 B since s18-disk, 650,776 B before: packs at zstd's default level, hash states
// of 108 bytes), with 0.5% of room. The log line estimates du -s against issue 12's target
// (docs/format.md §8.15d, §8.15f).
func TestEngine_CorpusBytesAppended(t *testing.T) {
	c, cuts := corpusTurns(t)
	log := &appendCounter{Log: memlog.New(1 << 20)}
	e := engine.New(log, engine.Config{})
	k := engine.Key{Namespace: "corpus", Session: "pi", Agent: "main"}
	from, packs, deleted := 0, 0, 0
	for i, to := range cuts {
		// The record the SDK writes: a 22-character save id, the writer, the reason.
		req := engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("TlbM0WohtFlqXnwEbg%04d", i), Writer: "vm/5001", Reason: "turn", Now: now,
			Payload: append(append([]byte{'['}, c.Span(from, to)...), ']')}
		if i > 0 {
			req.Base = u64(uint64(i))
		}
		s, err := e.Save(ctx, req)
		require.NoError(t, err, "save %d", i)
		if s.PackDue {
			r, err := e.Pack(ctx, k, false)
			require.NoError(t, err)
			packs, deleted = packs+1, deleted+r.Entries
		}
		from = to
	}
	// zstd(final) as checkpointbench computes it (the final conversation as the SDK sends it,
	// zstd's default level: docs/format.md §8.15), and what the store adds to what is appended:
	// 13 files of one 4 KiB block (CP_RESULTS's three are made by the first result stored, which
	// saves sent as requests never need), ~116 bytes per entry (JetStream's record, the subject,
	// the compare-and-swap header) and a 30-byte tombstone per entry deleted.
	const budget, zFinal, skeleton, perEntry, tombstone = 606_000, 313_567, 13 * 4 << 10, 116, 30
	blk := log.appended + perEntry*log.entries + tombstone*deleted
	du := (blk+4095)/4096*4096 + skeleton
	t.Logf("%d entries (%d packs, %d entries deleted): %d bytes appended (%.2f× zstd(final)); du -s ≈ %d B, target %d B",
		log.entries, packs, deleted, log.appended, float64(log.appended)/zFinal, du, zFinal*3/2+256<<10)
	require.Positive(t, packs)
	require.LessOrEqual(t, log.appended, budget)
}
