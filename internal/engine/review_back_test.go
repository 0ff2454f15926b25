package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// A pack naming itself, or a later pack, as the pack before it (hostile or damaged stored bytes)
// makes the walk back through the packs fail with ErrCorrupt: it never goes round the same packs
// forever (the walk passes over versions it gave already, so nothing else would stop it).
func TestEngine_HistoryPackLoop(t *testing.T) {
	mem := memlog.New(1 << 20)
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	enginetest.SaveTurns(t, engine.New(mem, engine.Config{PackEntries: 5}), k, 0, 2*30, 0)
	var packs []uint64
	require.NoError(t, mem.Range(ctx, k, 0, 0, func(en engine.Entry) bool {
		if isPack, _, err := engine.PackOf(en.Data); err == nil && isPack {
			packs = append(packs, en.Seq)
		}
		return true
	}))
	require.GreaterOrEqual(t, len(packs), 3)
	last, prev := packs[len(packs)-1], packs[len(packs)-2]
	for name, loop := range map[string]struct{ at, names uint64 }{
		"names itself":       {last, last},
		"names a later pack": {prev, last},
	} {
		t.Run(name, func(t *testing.T) {
			e := engine.New(&rewriteAt{Log: mem, at: loop.at, rewrite: func(d []byte) ([]byte, error) { return engine.WithPackBefore(d, loop.names) }}, engine.Config{PackEntries: 5})
			cx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, _, err := e.HistoryPage(cx, k, engine.HistoryCursor{}, 1000)
			require.ErrorIs(t, err, engine.ErrCorrupt)
			require.NoError(t, cx.Err(), "the walk went round until its deadline")
			_, err = e.Version(cx, k, 1)
			require.ErrorIs(t, err, engine.ErrCorrupt)
			require.NoError(t, cx.Err(), "the walk went round until its deadline")
		})
	}
}
