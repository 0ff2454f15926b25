package transfer_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// heapPeak samples the Go heap in use until stop is closed, and returns its peak.
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		var ms runtime.MemStats
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// Issue 10, item 4: 64 saves with forged chunk counts and 8 decompression bombs, published at
// once, raw. Each gets a typed refusal; the heap grows by less than the bound the ingest budget
// sets (floodBound); the daemon serves a normal save and restore afterwards. Before, a forged
// count preallocated the size limit per save and the bombs decoded side by side: with these
// limits the heap grew by 500-700 MiB (now 105-125 MiB, under a bound of 292 MiB).
func TestBounds_HostileFloodStaysWithinTheBudget(t *testing.T) {
	const maxBytes, budget = 64 << 20, 16 << 20
	env := testenv.Start(t, func(c *transfer.Config) { c.MaxCheckpointBytes, c.IngestBudgetBytes = maxBytes, budget })
	ctx := ctxT(t)
	bomb := testenv.Bomb(t, 3*maxBytes/2)
	nc := env.Conn()
	_, err := env.Client.Save(ctx, checkpoint.Key{Session: "before"}, turn(nil, "honest", 1))
	require.NoError(t, err)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := make(chan struct{})
	peak := heapPeak(stop)
	results := testenv.HostileSaves(t, nc, "hostile", 64, 8, bomb)
	close(stop)
	growth := int64(<-peak) - int64(before.HeapInuse)

	codes := map[string]int{}
	for _, id := range testenv.HostileSaveIDs(64, 8) {
		r, ok := results[id]
		require.True(t, ok, "%s has a result", id)
		require.False(t, r.OK, "%s refused", id)
		require.Contains(t, []string{wire.CodeBadRequest, wire.CodeTooLarge, wire.CodeBusy}, r.Error.Code, "%s: %s", id, r.Error.Message)
		codes[r.Error.Code]++
	}
	bound := floodBound(budget, maxBytes, env.Config.Lanes)
	t.Logf("refusals %v; heap grew by %.1f MiB (bound %.1f MiB)", codes, float64(growth)/(1<<20), float64(bound)/(1<<20))
	require.Less(t, growth, bound, "heap growth under a hostile flood")

	key := checkpoint.Key{Session: "after"}
	conv := turn(turn(nil, "honest", 1), "honest", 2)
	_, err = env.Client.Save(ctx, key, conv)
	require.NoError(t, err, "the daemon keeps serving")
	got, _, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, string(conv), string(got))
}

// floodBound is what the heap may grow by while saves are settled, however hostile (README,
// "Memory"): the budget; plus the save in progress the longest, which may exceed it (its body up
// to maxBytes, twice while its blocks are joined, and its zstd window); plus one zstd decoder per
// lane (a window of at most 8 MiB, kept between saves); the whole times 1.25 for garbage not yet
// collected (the collector runs at GOGC 25 while that much is held, housekeeping/eagergc.go), plus 16 MiB for
// the rest of the process (the embedded server's buffers and caches).
func floodBound(budget, maxBytes int64, lanes int) int64 {
	decoder := int64(codec.MaxBodyWindow + 512<<10)
	held := budget + 2*maxBytes + decoder + int64(lanes)*decoder
	return held*5/4 + 16<<20
}

// A save that finds the ingest budget spent waits, then is refused busy with a retry hint, through
// the normal result; once the budget is free the same save goes through. A save larger than the
// whole budget (but within --max-checkpoint-bytes) is stored when it is the only one in progress.
func TestBounds_SavesBeyondTheBudgetAreBusyThenGoThrough(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.MaxCheckpointBytes, c.IngestBudgetBytes = 16<<20, 1<<20 })
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "waits"}
	conv := turn(nil, "patient", 1)

	release := transfer.HoldIngestBudget(env.Daemon, 50*time.Millisecond)
	res := saveRaw(t, nc, key.WithDefaults(), "busy-1", nil, conv)
	requireRefused(t, res, wire.CodeBusy, "--ingest-memory")
	require.NotNil(t, res.Error.RetryAfterMillis)
	require.Positive(t, *res.Error.RetryAfterMillis)
	_, _, err := env.Client.Restore(ctx, key, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound, "nothing stored")
	release()

	res = saveRaw(t, nc, key.WithDefaults(), "busy-2", nil, conv)
	require.True(t, res.OK, "%+v", res.Error)

	big := bigConversation(4 << 20)
	v, err := env.Client.Save(ctx, checkpoint.Key{Session: "larger than the budget"}, big)
	require.NoError(t, err)
	require.Greater(t, v.RawBytes, int64(1<<20))
}

// bigConversation returns a conversation of about n bytes that compresses little (base64 of
// random bytes).
func bigConversation(n int) []byte {
	return []byte(`[` + imageMessage("big", randomBytes(n*3/4)) + `]`)
}
