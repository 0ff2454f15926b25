package transfer_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A first save (Cp-Expected-Version: 0) begins its session's creation before the daemon has read
// and validated the body: the namespace's index entry is on its way while the body is checked
// (docs/format.md §8.15j). First saves refused, sent by hand as raw requests (a body that is not
// JSON, not an array, a message of no known role, a body that does not decode as zstd), leave no
// index entry on the stream; a first save of a session that exists is a conflict, and the session
// stays listed once.
func TestSaveRequest_RefusedFirstSavesListNothing(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream, err := js.Stream(ctx, edge.LogStream)
	require.NoError(t, err)
	indexEntries := func() map[string]uint64 {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter("cp.idx.>"))
		require.NoError(t, err)
		return info.State.Subjects
	}
	key := func(s string) wire.Key { return wire.Key{Namespace: wire.DefaultNamespace, Session: s, Agent: "a"} }
	first := func(s, encoding string, body []byte) wire.SaveResult {
		return requestSave(t, nc, wire.SaveSubject(key(s)), map[string]string{wire.HdrSaveID: "first-" + s,
			wire.HdrExpectedVersion: "0", wire.HdrEncoding: encoding}, body)
	}

	refused := []struct {
		encoding, body, code string
	}{
		{wire.EncodingIdentity, `[{"role":"user","content":`, wire.CodeInvalid},
		{wire.EncodingIdentity, `{"role":"user","content":"hi"}`, wire.CodeInvalid},
		{wire.EncodingIdentity, `[{"role":"robot","content":"hi"}]`, wire.CodeInvalid},
		{wire.EncodingZstd, `not zstd`, wire.CodeInvalid},
	}
	for i, r := range refused {
		res := first(fmt.Sprint("refused-", i), r.encoding, []byte(r.body))
		require.False(t, res.OK, "%s", r.body)
		require.NotNil(t, res.Error, "%s", r.body)
		require.Equal(t, r.code, res.Error.Code, "%s: %s", r.body, res.Error.Message)
	}
	require.Empty(t, indexEntries(), "refused first saves list nothing")

	res := first("s", wire.EncodingIdentity, []byte(`[{"role":"user","content":"hi"}]`))
	require.True(t, res.OK, "%+v", res.Error)
	again := requestSave(t, nc, wire.SaveSubject(key("s")), map[string]string{wire.HdrSaveID: "another",
		wire.HdrExpectedVersion: "0", wire.HdrEncoding: wire.EncodingIdentity}, []byte(`[{"role":"user","content":"hello"}]`))
	require.NotNil(t, again.Error)
	require.Equal(t, wire.CodeConflict, again.Error.Code, again.Error.Message)
	idx := "cp.idx." + wire.EncodeID(wire.DefaultNamespace) // docs/format.md §8.2
	require.Equal(t, map[string]uint64{idx: 1}, indexEntries(), "the session is listed once")
}

// Over a loopback connection (the embedded server on 127.0.0.1, as here) a save's body travels as
// it is whenever it fits one message, whatever its size, unless WithCompressFrom was given (a
// server on this host may route the saves across a slow link to the daemon): zstd would cost the
// writer a compression and the daemon a decompression of bytes the daemon compresses anyway as it
// stores them (docs/format.md §8.15r). Only a body too large for one message is compressed (into
// fewer chunks, or, as here, one message). Every one is stored and read back byte for byte. Seen by a plain subscriber of the
// save subjects, which gets a copy of every request.
func TestSDK_LoopbackSavesGoAsTheyAre(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 128<<10)
	ctx := ctxT(t)
	watcher := env.Conn()
	sub, err := watcher.SubscribeSync(wire.SaveSubjectPrefix + ">")
	require.NoError(t, err)
	require.NoError(t, watcher.Flush()) // the subscription is on the server before the first save
	conv := func(word string, n int) []byte {
		return []byte(`[{"role":"user","content":"` + strings.Repeat(word+" ", n) + `"}]`)
	}
	small := conv("small", 100)                                               // ~600 B
	large := conv("large", 8<<10)                                             // ~48 KiB: past DefaultCompressFrom, within one 128 KiB message
	huge := conv("huge", 40<<10)                                              // ~200 KiB: chunked
	always, err := checkpoint.New(env.Conn(), checkpoint.WithCompressFrom(0)) // a slow link's setting
	require.NoError(t, err)
	for i, c := range []struct {
		client   *checkpoint.Client
		conv     []byte
		encoding string
	}{{env.Client, small, wire.EncodingIdentity}, {env.Client, large, wire.EncodingIdentity},
		{always, small, wire.EncodingZstd}, {always, large, wire.EncodingZstd}, {env.Client, huge, wire.EncodingZstd}} {
		key := checkpoint.Key{Session: fmt.Sprint("row", i)}
		_, err := c.client.Save(ctx, key, c.conv, checkpoint.ExpectVersion(0))
		require.NoError(t, err)
		m, err := sub.NextMsg(10 * time.Second)
		require.NoError(t, err)
		require.Equal(t, c.encoding, m.Header.Get(wire.HdrEncoding), "%d bytes", len(c.conv))
		if c.encoding == wire.EncodingIdentity {
			require.Equal(t, string(c.conv), string(m.Data))
		} else {
			require.Less(t, len(m.Data), len(c.conv)/4, "compressed into one message")
		}
		got, _, err := env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
		require.Equal(t, string(c.conv), string(got))
	}
}
