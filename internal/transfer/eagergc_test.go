package transfer

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gcPercent is the collector's target, read without setting it (setting it, even back, would race
// with the daemon's own changes in the tests that run one).
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

func TestEagerGC_LowersWhileLargeWorkIsInFlight(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	var g eagerGC
	g.begin()
	g.begin()
	require.Equal(t, eagerGCPercent, gcPercent())
	g.end()
	require.Equal(t, eagerGCPercent, gcPercent(), "one large save is still in progress")
	g.end()
	require.Equal(t, 100, gcPercent(), "set back")

	g.hold(100 * time.Millisecond)
	require.Equal(t, eagerGCPercent, gcPercent())
	g.begin()
	g.end()
	require.Equal(t, eagerGCPercent, gcPercent(), "the hold runs on")
	require.Eventually(t, func() bool { return gcPercent() == 100 }, 2*time.Second, 10*time.Millisecond)

	debug.SetGCPercent(10)
	g.begin()
	require.Equal(t, 10, gcPercent(), "a lower target is left alone")
	g.end()
	require.Equal(t, 10, gcPercent())

	off := eagerGC{disabled: true} // GOGC set in the environment
	debug.SetGCPercent(100)
	off.begin()
	require.Equal(t, 100, gcPercent())
	off.end()
}

// The save path: a save's reservation lowers the target once it holds a large checkpoint's bytes
// (by bytes reserved, never by a declared size) and sets it back when the save is settled.
func TestEagerGC_LargeSaveLowersUntilSettled(t *testing.T) {
	if eager.disabled {
		t.Skip("GOGC is set in the environment: the daemon leaves the collector alone")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	mem := newIngestBudget(2 * largeBytes).begin(context.Background())
	require.NoError(t, mem.Reserve(largeBytes-1))
	require.Equal(t, 100, gcPercent(), "not yet large")
	require.NoError(t, mem.Reserve(1))
	require.Equal(t, eagerGCPercent, gcPercent(), "a large save in progress")
	mem.end()
	require.Equal(t, 100, gcPercent(), "set back once settled")
}
