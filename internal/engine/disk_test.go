package engine_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
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

// The corpus saved after every assistant turn (485 saves, each an append of what grew, packed by
// the default policy, as the daemon saves it in checkpointbench --only disk): every entry the
// engine appends stays on disk on such a store, so their bytes bound the data directory. The
// bound is issue 12's disk target, 1.5 × zstd(final) + 256 KiB, less the store's fixed files
// (16 files of one 4 KiB block: 64 KiB), JetStream's own ~116 bytes per entry (record, subject,
// the compare-and-swap header) and the pack's deletes' tombstones (30 bytes each), with 16 KiB
// to spare for block rounding and the daemon's other writes.
func TestEngine_CorpusBytesAppended(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	require.NoError(t, err)
	c, err := codec.Parse(raw)
	require.NoError(t, err)
	var cuts []int
	for i, m := range c.Messages {
		if codec.MessageRole(m) == "assistant" {
			cuts = append(cuts, i+1)
		}
	}
	log := &appendCounter{Log: memlog.New(1 << 20)}
	e := engine.New(log, engine.Config{})
	k := engine.Key{Namespace: "corpus", Session: "pi", Agent: "main"}
	from, packs, deleted := 0, 0, 0
	for i, to := range cuts {
		req := engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("turn-%03d", i), Now: now,
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
	// zstd's default level: docs/format.md §8.15), and what the store adds to what is appended.
	const zFinal, skeleton, perEntry, tombstone, spare = 313_567, 64 << 10, 116, 30, 16 << 10
	limit := zFinal*3/2 + 256<<10 - skeleton - perEntry*log.entries - tombstone*deleted - spare
	t.Logf("%d entries (%d packs, %d entries deleted): %d bytes appended (%.2f× zstd(final)); limit %d",
		log.entries, packs, deleted, log.appended, float64(log.appended)/zFinal, limit)
	require.Positive(t, packs)
	require.LessOrEqual(t, log.appended, limit)
}
