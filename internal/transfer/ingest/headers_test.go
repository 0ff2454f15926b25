package ingest

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// TestParseSaveHeaders_ChunksIsAPlainDecimal: Cp-Chunks is spelled as every other count of the
// protocol (docs/protocol.md §12): a plain decimal, no sign, no leading zero. "007" is refused
// with a bad_request naming the header, not read as 7.
func TestParseSaveHeaders_ChunksIsAPlainDecimal(t *testing.T) {
	key := wire.Key{Namespace: "ns", Session: "s", Agent: "main"}
	parse := func(chunks string) (saveHeaders, error) {
		return parseSaveHeaders(nats.Header{wire.HdrChunks: []string{chunks}}, key, "id", time.Now(), fuzzMaxBytes)
	}
	for _, s := range []string{"007", "01", "00", "+1", "-1", " 1", "1 ", "1e3", "0x10"} {
		_, err := parse(s)
		require.Error(t, err, "Cp-Chunks %q", s)
		require.Equal(t, wire.CodeBadRequest, edge.ToWireError(err).Code, "Cp-Chunks %q: %v", s, err)
		require.Contains(t, err.Error(), wire.HdrChunks, "the refusal names the header")
	}
	hs, err := parse("7")
	require.NoError(t, err)
	require.Equal(t, 7, hs.chunks)
}
