package housekeeping

import (
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEagerGC_LowersWhileLargeWorkIsInFlight(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	var g eagerGC
	g.begin()
	g.begin()
	require.Equal(t, EagerGCPercent, GCPercent())
	g.end()
	require.Equal(t, EagerGCPercent, GCPercent(), "one large save is still in progress")
	g.end()
	require.Equal(t, 100, GCPercent(), "set back")

	g.hold(100 * time.Millisecond)
	require.Equal(t, EagerGCPercent, GCPercent())
	g.begin()
	g.end()
	require.Equal(t, EagerGCPercent, GCPercent(), "the hold runs on")
	require.Eventually(t, func() bool { return GCPercent() == 100 }, 2*time.Second, 10*time.Millisecond)

	debug.SetGCPercent(10)
	g.begin()
	require.Equal(t, 10, GCPercent(), "a lower target is left alone")
	g.end()
	require.Equal(t, 10, GCPercent())

	off := eagerGC{disabled: true} // GOGC set in the environment
	debug.SetGCPercent(100)
	off.begin()
	require.Equal(t, 100, GCPercent())
	off.end()
}
