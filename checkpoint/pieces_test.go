package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/pieces"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A server whose max_payload leaves no room beside the 16 KiB a chunk keeps for its headers
// cannot take a save in pieces: the SDK says so (too_large, naming max_payload) instead of
// cutting pieces of a negative size (a panic) or of none (an endless loop).
func TestSave_NoRoomForPieces(t *testing.T) {
	dir := t.TempDir()
	s, err := embedded.StartServer(embedded.ServerConfig{DataDir: dir, Listen: "127.0.0.1:-1", MaxPayload: 8 << 10})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c, err := checkpoint.New(nc, checkpoint.WithTimeout(5*time.Second))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conv := incompressible(20 << 10)
	_, err = c.Save(ctx, checkpoint.Key{Session: "tiny"}, conv)
	var e *checkpoint.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, wire.CodeTooLarge, e.Code)
	require.Contains(t, e.Message, "max_payload")
}

// incompressible is a conversation of about n bytes that zstd cannot shrink.
func incompressible(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`[{"role":"user","content":"`)
	x := uint64(88172645463325252)
	for b.Len() < n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b.WriteString(strconv.FormatUint(x, 36))
	}
	b.WriteString(`"}]`)
	return b.Bytes()
}

// A hostile (or broken) daemon's pieces are joined only as docs/protocol.md §12 says: each must
// carry the Cp-Offset asked for, hold at least a byte, stay within Cp-Total and say what the
// first said. Anything else is ErrCorrupt, asked again as identity, and refused again.
func TestRestore_HostilePieces(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := checkpoint.Key{Session: "hostile"}.WithDefaults()
	conv := incompressible(20 << 10)
	v, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	const size = 4 << 10
	honest := func(offset int64) (int64, []byte, int) {
		end := min(offset+size, int64(len(conv)))
		return offset, conv[offset:end], len(conv)
	}
	for _, c := range []struct {
		name  string
		piece func(offset int64) (at int64, data []byte, total int) // what the daemon answers to a read at offset
		ok    bool
		why   string // what the error says
	}{
		{name: "honest", piece: honest, ok: true},
		// The bytes are another piece's: only the hash of the whole can tell.
		{name: "another piece under the offset asked for", piece: func(o int64) (int64, []byte, int) {
			if o == size {
				_, data, total := honest(2 * size)
				return o, data, total
			}
			return honest(o)
		}, why: "does not match its hash"},
		{name: "the piece asked for, labelled with another offset", piece: func(o int64) (int64, []byte, int) {
			at, data, total := honest(o)
			if o == size {
				at = 2 * size
			}
			return at, data, total
		}, why: "piece 1 (offset 8192): pieces missing before it"},
		{name: "an empty piece before the end", piece: func(o int64) (int64, []byte, int) {
			if o == size {
				return o, nil, len(conv)
			}
			return honest(o)
		}, why: "piece 1 (offset 4096): empty piece"},
		{name: "a piece past Cp-Total", piece: func(o int64) (int64, []byte, int) {
			if o >= 4*size {
				return o, conv[o:min(o+2*size, int64(len(conv)))], len(conv) - 1
			}
			at, data, _ := honest(o)
			return at, data, len(conv) - 1
		}, why: "piece 4 (offset 16384): runs past the announced end"},
		{name: "a Cp-Total that changes", piece: func(o int64) (int64, []byte, int) {
			at, data, total := honest(o)
			if o > 0 {
				total--
			}
			return at, data, total
		}, why: "piece 1: pieces of different bodies"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env.StopDaemon()
			nc := env.Conn()
			get, err := nc.Subscribe("cp.api.*."+wire.OpGet, func(m *nats.Msg) {
				data, _ := json.Marshal(v)
				_ = m.Respond(data)
			})
			require.NoError(t, err)
			defer func() { _ = get.Unsubscribe() }()
			read, err := nc.Subscribe("cp.api.*."+wire.OpRead, func(m *nats.Msg) {
				var req wire.ReadRequest
				if json.Unmarshal(m.Data, &req) != nil {
					return
				}
				at, data, total := c.piece(req.Offset)
				r := nats.NewMsg(m.Reply)
				r.Data = data
				r.Header.Set(wire.HdrTotal, strconv.Itoa(total))
				r.Header.Set(wire.HdrOffset, strconv.FormatInt(at, 10))
				r.Header.Set(wire.HdrEncoding, wire.EncodingIdentity)
				r.Header.Set(wire.HdrHash, v.Hash)
				_ = nc.PublishMsg(r)
			})
			require.NoError(t, err)
			defer func() { _ = read.Unsubscribe() }()
			require.NoError(t, nc.Flush())
			got, _, err := env.Client.Restore(ctx, key, v.Version)
			if c.ok {
				require.NoError(t, err)
				require.True(t, bytes.Equal(conv, got))
				return
			}
			require.ErrorIs(t, err, checkpoint.ErrCorrupt, fmt.Sprint(err))
			require.Contains(t, err.Error(), c.why)
		})
	}
}

// The chunks of an earlier call with the same save id that never sent its save (its process died
// after the chunks), then a retry of that save id with another conversation: the daemon joined the
// earlier call's chunks (the retry's skipped as repeats), stored them as this save, and the SDK
// confirmed the version by its save id, so Save returned success and Restore gave back bytes that
// were never this save's. The save is refused instead; sent again, it stores what was sent.
func TestSave_EarlierChunksOfTheSaveIDWithOtherBytes(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := checkpoint.Key{Session: "earlier"}.WithDefaults()
	const saveID = "turn-8"
	earlier := incompressible(100 << 10)
	conv := append([]byte(nil), earlier...)
	conv[len(conv)-10] ^= 1 // the same size, so as many chunks: other bytes

	// The earlier call's chunks, cut and numbered as the SDK cuts them, acknowledged.
	nc, err := nats.Connect(env.Server.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	cut, err := pieces.Split(codec.CompressZstd(earlier), pieces.Size(nc.MaxPayload(), pieces.ChunkRoom))
	require.NoError(t, err)
	require.Greater(t, len(cut), 1)
	for i, p := range cut {
		m := nats.NewMsg(wire.ChunkSubject(key.Namespace, saveID))
		m.Header.Set(wire.HdrChunk, strconv.Itoa(i))
		m.Data = p
		_, err := js.PublishMsg(m)
		require.NoError(t, err)
	}

	v, err := env.Client.Save(ctx, key, conv, checkpoint.WithSaveID(saveID))
	if err == nil {
		got, _, err := env.Client.Restore(ctx, key, v.Version)
		require.NoError(t, err)
		require.True(t, bytes.Equal(conv, got), "Save succeeded: the version holds what was sent (%d bytes, the earlier call's: %v)", len(got), bytes.Equal(earlier, got))
		return
	}
	var e *checkpoint.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, wire.CodeBadRequest, e.Code, "%v", err)
	_, err = env.Client.Get(ctx, key, 1)
	require.ErrorIs(t, err, checkpoint.ErrNotFound, "nothing stored")

	v, err = env.Client.Save(ctx, key, conv, checkpoint.WithSaveID(saveID))
	require.NoError(t, err, "sent again once the refused save's chunks are removed")
	got, _, err := env.Client.Restore(ctx, key, v.Version)
	require.NoError(t, err)
	require.True(t, bytes.Equal(conv, got))
}
