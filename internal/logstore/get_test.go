package logstore

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// A read of one entry (Last, Get) is a request on the connection's shared reply subscription: it
// allocates about what it reads, not a subscription's pending channel (512 KiB) each time.
func TestLog_OneEntryReadsAllocateLittle(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	ctx := context.Background()
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	seq, err := l.Append(ctx, k, []byte("entry"), 0)
	require.NoError(t, err)
	_, err = l.Last(ctx, k) // the reply subscription is made on the first request
	require.NoError(t, err)

	const reads = 50
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range reads {
		last, err := l.Last(ctx, k)
		require.NoError(t, err)
		require.Equal(t, seq, last.Seq)
		got, err := l.Get(ctx, k, seq)
		require.NoError(t, err)
		require.Equal(t, "entry", string(got.Data))
	}
	runtime.ReadMemStats(&after)
	// The server runs in this process: its side of the reads counts too (a few KiB each).
	perRead := (after.TotalAlloc - before.TotalAlloc) / (2 * reads)
	require.Less(t, perRead, uint64(64<<10), "bytes allocated per read of one entry")

	_, err = l.Last(ctx, engine.Key{Namespace: "n", Session: "none", Agent: "a"})
	require.ErrorIs(t, err, engine.ErrNotFound)
	_, err = l.Get(ctx, k, seq+100)
	require.ErrorIs(t, err, engine.ErrNotFound)
}
