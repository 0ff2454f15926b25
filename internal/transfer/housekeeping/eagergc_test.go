package housekeeping

import (
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
	require.Equal(t, EagerGCPercent, gcPercent())
	g.end()
	require.Equal(t, EagerGCPercent, gcPercent(), "one large save is still in progress")
	g.end()
	require.Equal(t, 100, gcPercent(), "set back")

	g.hold(100 * time.Millisecond)
	require.Equal(t, EagerGCPercent, gcPercent())
	g.begin()
	g.end()
	require.Equal(t, EagerGCPercent, gcPercent(), "the hold runs on")
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
