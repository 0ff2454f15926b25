package wire

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// HashBeside gives what Hash gives, below and above the size from which it hashes on a goroutine,
// and as often as it is asked.
func TestHashBeside_SameAsHash(t *testing.T) {
	for _, n := range []int{0, 1, hashBesideBytes - 1, hashBesideBytes, 3 << 20} {
		data := bytes.Repeat([]byte{'x', 7, 0xff}, n/3+1)[:n]
		got := HashBeside(data)
		require.Equal(t, Hash(data), got(), "%d bytes", n)
		require.Equal(t, Hash(data), got(), "%d bytes, asked again", n)
	}
}
