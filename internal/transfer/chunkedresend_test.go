package transfer_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

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
	// The chunks are removed after the reply (off the save's latency): a request sent again
	// before that finds them and is compared whole. Here the writer's second request comes later.
	chunks, err := js.Stream(ctx, wire.StreamChunks)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := chunks.GetLastMsgForSubject(ctx, wire.ChunkSubject(key.Namespace, "big"))
		return errors.Is(err, jetstream.ErrMsgNotFound)
	}, 10*time.Second, 10*time.Millisecond, "the stored save's chunks removed")

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

// A chunked save refused (a conflict, an invalid conversation) has its chunks removed with the
// refusal. Its writer, having lost only the reply, sends the same save again without publishing
// the chunks again: it gets the same refusal (same code, same received hash), not a bad_request
// about the chunks it did send. By raw NATS messages: chunks published by hand on CP_CHUNKS, as the
// SDK does, the save sent on each path and sent again on both.
func TestSave_ChunkedRefusalSentAgainGetsTheSameRefusal(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	key := wire.Key{Session: "refused-resent"}.WithDefaults()
	res := saveRawHeader(t, nc, js, key, "request", "first", nil, []byte(`[{"role":"user","content":"first"}]`))
	require.True(t, res.OK, "%+v", res.Error)

	publishChunks := func(saveID, conv string) {
		for i, piece := range []string{conv[:len(conv)/2], conv[len(conv)/2:]} {
			c := nats.NewMsg(wire.ChunkSubject(key.Namespace, saveID))
			c.Header.Set(wire.HdrChunk, strconv.Itoa(i))
			c.Data = []byte(piece)
			_, err := js.PublishMsg(ctx, c)
			require.NoError(t, err)
		}
	}
	chunked := func(h nats.Header) nats.Header {
		h[wire.HdrChunks] = []string{"2"}
		return h
	}
	cases := []struct {
		name, conv, code string
		h                nats.Header
	}{
		{"conflict", `[{"role":"user","content":"first"},{"role":"user","content":"stale"}]`, wire.CodeConflict,
			nats.Header{wire.HdrExpectedVersion: {"7"}}},
		{"invalid", `[{"role":"user","content":"first"},{"role":"nobody","content":"x"}]`, wire.CodeInvalid, nats.Header{}},
	}
	for _, c := range cases {
		for _, first := range []string{"request", "ingest"} {
			saveID := c.name + "-" + first
			publishChunks(saveID, c.conv)
			refusal := saveRawHeader(t, nc, js, key, first, saveID, chunked(c.h), nil)
			requireRefused(t, refusal, c.code)
			require.NotEmpty(t, refusal.Received, "refused after its body was read")
			for _, again := range []string{"request", "ingest"} {
				res := saveRawHeader(t, nc, js, key, again, saveID, chunked(c.h), nil)
				require.Equal(t, refusal.Error, res.Error, "%s sent by %s, again by %s", c.name, first, again)
				require.Equal(t, refusal.Received, res.Received, "%s sent by %s, again by %s", c.name, first, again)
			}
		}
	}

	h, err := env.Client.History(ctx, checkpoint.Key{Session: key.Session})
	require.NoError(t, err)
	require.Len(t, h, 1, "nothing stored but the first")
	s, err := js.Stream(ctx, wire.StreamChunks)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "no chunks left behind")
}
