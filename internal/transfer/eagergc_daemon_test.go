package transfer_test

import (
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/housekeeping"
)

// A daemon saving or reading a large checkpoint runs the collector with a lower target, so that
// its peak memory stays close to what is live (issue 12: peak RSS < 3× the checkpoint), and sets
// it back afterwards (housekeeping/eagergc.go). Seen from outside: the target while a large save is in flight,
// right after a large restore (a read in pieces holds it a moment after its last), and later.
func TestEagerGC_DaemonLowersWhileLargeCheckpointIsSavedOrRead(t *testing.T) {
	if housekeeping.EagerGCDisabled() {
		t.Skip("GOGC is set in the environment: the daemon leaves the collector alone")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	env := testenv.Start(t)
	ctx := ctxT(t)
	// One message of text that compresses well, so that the save costs little CPU.
	conv := []byte(`[{"role":"user","content":"` + strings.Repeat("a large checkpoint. ", housekeeping.LargeBytes/20+1) + `"}]`)
	key := checkpoint.Key{Session: "large"}

	var lowest atomic.Int64
	lowest.Store(100)
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // samples the target while the save is in flight
		defer close(sampled)
		for {
			if p := int64(housekeeping.GCPercent()); p < lowest.Load() {
				lowest.Store(p)
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	_, err := env.Client.Save(ctx, key, conv)
	close(done)
	<-sampled
	require.NoError(t, err)
	require.EqualValues(t, housekeeping.EagerGCPercent, lowest.Load(), "lowered while the large save was in flight")
	require.Equal(t, 100, housekeeping.GCPercent(), "set back once the save is settled")

	got, _, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, len(conv), len(got))
	require.Equal(t, housekeeping.EagerGCPercent, housekeeping.GCPercent(), "lowered by the large read, for a moment after its last piece")
	require.Eventually(t, func() bool { return housekeeping.GCPercent() == 100 }, 10*time.Second, 20*time.Millisecond, "set back after the read")
}
