package transfer_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A save id identifies one save. Where the daemon cannot compare a repeat of it with the version
// it made, it says so instead of answering that version silently (docs/protocol.md §4.3): the
// duplicate carries `unverified`, the reason. Two such cases, by raw NATS messages on both paths:
//   - a chunked save sent again after it was stored: its chunks were removed (a retry's chunks,
//     sent again under the same message ids, are dropped by JetStream as repeats);
//   - an append whose base version retention removed: what can still be told is (the version the
//     save id made was saved onto that base and ends with these messages: else save_id_reused),
//     and the duplicate says the rest was not compared.
func TestSave_RepeatTheDaemonCannotCompareSaysSo(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	t.Run("chunks gone", func(t *testing.T) {
		key := wire.Key{Session: "chunked"}.WithDefaults()
		conv := `[{"role":"user","content":"one piece, then another, then the last"}]`
		for i, piece := range []string{conv[:20], conv[20:40], conv[40:]} {
			c := nats.NewMsg(wire.ChunkSubject(key.Namespace, "big"))
			c.Header.Set(wire.HdrChunk, strconv.Itoa(i))
			c.Data = []byte(piece)
			_, err := js.PublishMsg(ctx, c)
			require.NoError(t, err)
		}
		chunked := nats.Header{wire.HdrChunks: {"3"}}
		res := saveRawHeader(t, nc, js, key, "ingest", "big", chunked, nil)
		require.True(t, res.OK, "%+v", res.Error)
		require.Empty(t, res.Unverified, "compared: it is the first")
		for _, path := range []string{"ingest", "request"} {
			res := saveRawHeader(t, nc, js, key, path, "big", chunked, nil)
			require.True(t, res.OK && res.Duplicate, "%s: %+v", path, res.Error)
			require.Equal(t, uint64(1), res.Version.Version)
			require.Empty(t, res.Received, "no body was read")
			require.Contains(t, res.Unverified, "chunks were removed", path)
		}
	})

	t.Run("base removed by retention", func(t *testing.T) {
		key := wire.Key{Session: "pruned"}.WithDefaults()
		msg := func(s string) []byte { return []byte(`[{"role":"user","content":"` + s + `"}]`) }
		for i, s := range []string{"one", "two", "three", "four"} {
			h := nats.Header{}
			if i > 0 {
				h.Set(wire.HdrBaseVersion, strconv.Itoa(i))
			}
			res := saveRawHeader(t, nc, js, key, "request", "s"+strconv.Itoa(i+1), h, msg(s))
			require.True(t, res.OK, "%+v", res.Error)
		}
		_, err := env.Client.Prune(context.Background(), key.Namespace, checkpoint.PruneOptions{Session: key.Session, KeepLast: 2})
		require.NoError(t, err) // versions 1 and 2 removed; s3 made version 3 onto version 2
		onto2 := nats.Header{wire.HdrBaseVersion: {"2"}}
		for _, path := range []string{"request", "ingest"} {
			res := saveRawHeader(t, nc, js, key, path, "s3", onto2, msg("three"))
			require.True(t, res.OK && res.Duplicate, "%s: %+v", path, res.Error)
			require.Equal(t, uint64(3), res.Version.Version)
			require.Contains(t, res.Unverified, "removed by retention", path)

			res = saveRawHeader(t, nc, js, key, path, "s3", onto2, msg("another three"))
			requireRefused(t, res, wire.CodeSaveIDReused, "does not end with")
			res = saveRawHeader(t, nc, js, key, path, "s3", nats.Header{wire.HdrBaseVersion: {"1"}}, msg("three"))
			requireRefused(t, res, wire.CodeSaveIDReused, "saved onto version 2, this save appends to version 1")
		}
		h, err := env.Client.History(ctx, checkpoint.Key{Session: key.Session})
		require.NoError(t, err)
		require.Len(t, h, 2, "nothing stored")
	})
}

// The Go SDK surfaces the daemon's `unverified` on the Version a save returns (Version.Unverified):
// an Append sent again with its save id after retention removed its base is the duplicate, and the
// caller learns that it was not compared. A repeat the daemon compared says nothing.
func TestSDK_DuplicateSaysWhatWasNotCompared(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "sdk-unverified"}
	msg := func(s string) []byte { return []byte(`[{"role":"user","content":"` + s + `"}]`) }
	v, err := env.Client.Save(ctx, key, msg("one"))
	require.NoError(t, err)
	for i, s := range []string{"two", "three", "four"} {
		v, err = env.Client.Append(ctx, key, v.Version, msg(s), checkpoint.WithSaveID("a"+strconv.Itoa(i+2)))
		require.NoError(t, err)
		require.Empty(t, v.Unverified, "a new version")
	}

	again, err := env.Client.Append(ctx, key, 3, msg("four"), checkpoint.WithSaveID("a4"))
	require.NoError(t, err)
	require.Equal(t, uint64(4), again.Version)
	require.Empty(t, again.Unverified, "compared by the daemon")

	_, err = env.Client.Prune(ctx, key.WithDefaults().Namespace, checkpoint.PruneOptions{Session: key.Session, KeepLast: 2})
	require.NoError(t, err) // versions 1 and 2 removed; a3 made version 3 onto version 2
	again, err = env.Client.Append(ctx, key, 2, msg("three"), checkpoint.WithSaveID("a3"))
	require.NoError(t, err)
	require.Equal(t, uint64(3), again.Version)
	require.Contains(t, again.Unverified, "removed by retention")
}
