package transfer_test

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A chunked save sent as a request is stored, and its chunks removed; the same save comes again
// (the SDK sends a request again when its reply does not come in time: a loaded daemon, a lost
// reply; another daemon of the queue group may take it). It finds no chunks, and no result on
// CP_RESULTS (a request's result is never stored there), yet it is the duplicate of the version it
// made, not a bad_request about missing chunks (TestCluster_Harness: "large-3: unintended refusal:
// bad request: the chunks on ...: 0 of 2 pieces received"). By raw NATS messages, on both paths.
func TestSave_ChunkedRequestSentAgainAfterItWasStoredIsADuplicate(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	key := wire.Key{Session: "resent"}.WithDefaults()
	conv := `[{"role":"user","content":"one piece, then another, then the last"}]`
	for i, piece := range []string{conv[:20], conv[20:40], conv[40:]} {
		c := nats.NewMsg(wire.ChunkSubject(key.Namespace, "big"))
		c.Header.Set(wire.HdrChunk, strconv.Itoa(i))
		c.Data = []byte(piece)
		_, err := js.PublishMsg(ctx, c)
		require.NoError(t, err)
	}
	chunked := nats.Header{wire.HdrChunks: {"3"}}
	res := saveRawHeader(t, nc, js, key, "request", "big", chunked, nil)
	require.True(t, res.OK, "%+v", res.Error)
	require.Empty(t, res.Unverified, "compared: it is the first")

	for _, path := range []string{"request", "ingest"} {
		res := saveRawHeader(t, nc, js, key, path, "big", chunked, nil)
		require.True(t, res.OK && res.Duplicate, "%s: %+v", path, res.Error)
		require.Equal(t, uint64(1), res.Version.Version, path)
		require.Contains(t, res.Unverified, "chunks were removed", path)
	}

	// A save id the session never saved is still refused for its missing chunks.
	res = saveRawHeader(t, nc, js, key, "request", "never-sent", chunked, nil)
	requireRefused(t, res, wire.CodeBadRequest, "0 of 3 pieces received")

	h, err := env.Client.History(ctx, checkpoint.Key{Session: key.Session})
	require.NoError(t, err)
	require.Len(t, h, 1, "nothing stored but the first")
}
