package transfer_test

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The refusal of a chunked save is stored on CP_RESULTS under its namespace and save id alone
// (cp.result.<ns>.<saveid>), and replayed to a resend of that save whose chunks are gone. A
// writer of another session of the namespace that uses the same save id (a guess, or one seen
// on the chunk subjects) gets its own refusal stored there; it must never be what the first
// session's writer is answered: that writer's chunked save, sent with its chunks, is stored, and
// the same save sent again without them is its duplicate; a save of that session whose chunks
// never came is refused for them, not answered the other session's refusal. By raw NATS messages.
func TestSave_ChunkedRefusalOfAnotherSessionIsNotReplayed(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	victim := wire.Key{Session: "victim"}.WithDefaults()
	other := wire.Key{Session: "other"}.WithDefaults()
	publishChunks := func(saveID, conv string) {
		t.Helper()
		for i, piece := range []string{conv[:len(conv)/2], conv[len(conv)/2:]} {
			c := nats.NewMsg(wire.ChunkSubject(victim.Namespace, saveID))
			c.Header.Set(wire.HdrChunk, strconv.Itoa(i))
			c.Data = []byte(piece)
			_, err := js.PublishMsg(ctx, c)
			require.NoError(t, err)
		}
	}
	chunked := func() nats.Header { return nats.Header{wire.HdrChunks: {"2"}} }
	for _, path := range []string{"request", "ingest"} {
		saveID := "shared-" + path
		// The other session's writer sends an invalid chunked save under that save id first.
		publishChunks(saveID, `[{"role":"nobody","content":"x"}]`)
		requireRefused(t, saveRawHeader(t, nc, js, other, "request", saveID, chunked(), nil), wire.CodeInvalid)
		// A save of the victim's session under that save id whose chunks never came.
		res := saveRawHeader(t, nc, js, victim, path, saveID, chunked(), nil)
		requireRefused(t, res, wire.CodeBadRequest, "pieces received")
		// The victim's genuine save, its chunks sent: stored; sent again without them: its duplicate.
		publishChunks(saveID, `[{"role":"user","content":"the victim's own turn"}]`)
		res = saveRawHeader(t, nc, js, victim, path, saveID, chunked(), nil)
		require.True(t, res.OK, "%s: %+v", path, res.Error)
		again := saveRawHeader(t, nc, js, victim, "request", saveID, chunked(), nil)
		require.True(t, again.OK && again.Duplicate, "%s: %+v", path, again.Error)
		require.Equal(t, res.Version.Version, again.Version.Version)
	}
}
