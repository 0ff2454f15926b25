package checkpoint

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// decode returns the bytes and their SHA-256 whatever the size (hashed after the decoding, or beside
// it in pieces of many blocks), and refuses a body that decodes to more or fewer bytes than its
// reply announced as corrupt.
func TestDecode_HashesWhatItDecodes(t *testing.T) {
	for _, size := range []int{0, 1, decodeBesideBytes - 1, decodeBesideBytes, 3<<20 + 17} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			raw := make([]byte, size)
			for i := range raw {
				raw[i] = byte(i*7919>>8) ^ byte(i>>13) // compressible, but not all one block
			}
			body := codec.CompressZstd(raw)
			reply := readReply{total: int64(len(body)), raw: int64(size), encoding: wire.EncodingZstd, hash: wire.Hash(raw)}
			got, hash, err := decode(body, reply, Version{})
			require.NoError(t, err)
			require.True(t, bytes.Equal(raw, got))
			require.Equal(t, wire.Hash(raw), hash)

			reply.raw = int64(size) + 1
			_, _, err = decode(body, reply, Version{})
			require.ErrorIs(t, err, ErrCorrupt, "fewer bytes than announced")
			if size > 0 {
				reply.raw = int64(size) - 1
				_, _, err = decode(body, reply, Version{})
				require.ErrorIs(t, err, ErrCorrupt, "more bytes than announced")
			}
		})
	}
}
