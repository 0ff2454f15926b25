package ingest

import (
	"context"
	"io"
	"testing"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
	"github.com/stretchr/testify/require"
)

// TestReadChunks_ZstdEarlierAttempt: a zstd body's chunks, then those of an earlier attempt's
// other body under the same numbers: the decoder reads to the end of the chunks, so the ones
// after the last are checked as repeats (bad_request), not left unread.
func TestReadChunks_ZstdEarlierAttempt(t *testing.T) {
	body := codec.CompressZstd([]byte(`[{"role":"user","content":"hello there, this is a test"}]`))
	other := codec.CompressZstd([]byte(`[{"role":"user","content":"HELLO there, this is a test"}]`))
	h := len(body) / 2
	seq := [][]byte{body[:h], body[h:], other[:h], other[h:]}
	at := []int64{0, 1, 0, 1}
	i := 0
	next := func() (int64, []byte, error) {
		if i >= len(seq) {
			return 0, nil, io.EOF
		}
		i++
		return at[i-1], seq[i-1], nil
	}
	b := NewBudget(1 << 30)
	mem := b.begin(context.Background())
	_, _, err := readChunks("s", 2, next, wire.EncodingZstd, 1<<20, mem)
	mem.end()
	require.Error(t, err)
	require.Equal(t, wire.CodeBadRequest, edge.ToWireError(err).Code, "%v", err)
}
