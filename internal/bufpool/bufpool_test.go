package bufpool

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A buffer given back is handed out again, empty and with its room; one larger than Max is not
// kept; a new one has at least Min. (sync.Pool may drop what it is given, under the race detector
// a quarter of it on purpose: the buffer is given back until it comes out again.)
func TestPool(t *testing.T) {
	p := &Pool{Min: 64, Max: 1 << 10}
	b := p.Get(10)
	require.Equal(t, 0, len(b))
	require.Equal(t, 64, cap(b), "at least Min")
	b = append(b, "kept"...)
	again := func(b []byte, n int) bool {
		for range 100 {
			p.Put(b)
			if got := p.Get(n); cap(got) == cap(b) && &got[:1][0] == &b[:1][0] {
				require.Equal(t, 0, len(got), "empty")
				return true
			}
		}
		return false
	}
	require.True(t, again(b, 32), "the buffer given back")
	require.False(t, again(b, 200), "too small a buffer kept: a new one")
	require.False(t, again(p.Get(4<<10), 4<<10), "larger than Max: not kept")
}
