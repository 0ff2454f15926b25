package transfer_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A read that starts while an earlier read of the same request is held between its pieces, but
// whose bytes are no longer the held ones (the session was deleted and saved again: version 1 is
// another conversation), is served every piece from one body: its first piece is assembled afresh,
// and its later pieces must not come from the stale hold (docs/protocol.md §5: every piece of one
// read carries the same Cp-Total, Cp-Encoding and Cp-Hash). Both encodings.
func TestRead_NewReadIsNotContinuedFromAStaleHold(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10, func(c *transfer.Config) { c.Engine.NoPack = true })
	ctx := ctxT(t)
	nc := env.Conn()
	corpus := corpusMessages(t, "claude_code_spotter_258c7280.json")
	for _, enc := range []string{wire.EncodingIdentity, wire.EncodingZstd} {
		t.Run(enc, func(t *testing.T) {
			key := checkpoint.Key{Session: "again-" + enc}
			first := arrayOf(corpus)
			_, err := env.Client.Save(ctx, key, first)
			require.NoError(t, err)
			req := wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: key.Session}, Version: 1, Encoding: enc}
			data, _ := json.Marshal(req)
			m, err := nc.Request(wire.APISubject(wire.DefaultNamespace, wire.OpRead), data, 10e9)
			require.NoError(t, err)
			require.Empty(t, m.Header.Get(wire.HdrServiceErrorCode), "%s", m.Data)
			total, _ := strconv.Atoi(m.Header.Get(wire.HdrTotal))
			require.Less(t, len(m.Data), total, "the read comes in pieces: its body is held")

			// The client of that read goes away; the session is deleted through another daemon of
			// the cluster (here: in the store directly, which this daemon's holds know nothing of)
			// and saved again, so that its version 1 is another conversation (fewer messages, so
			// another length and hash).
			k := key.WithDefaults()
			_, err = env.Daemon.Engine.Delete(ctx, engine.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}, nil)
			require.NoError(t, err)
			second := arrayOf(corpus[:len(corpus)*2/3])
			v, err := env.Client.Save(ctx, key, second)
			require.NoError(t, err)
			require.EqualValues(t, 1, v.Version)

			// rawRead requires every piece's headers to be those of the first.
			body, hdr, pieces := rawRead(t, nc, wire.DefaultNamespace, req)
			require.Greater(t, pieces, 1)
			require.Equal(t, v.Hash, hdr.Get(wire.HdrHash))
			if enc == wire.EncodingIdentity {
				require.Equal(t, second, body)
			} else {
				require.Equal(t, second, plainDecode(t, body))
			}
		})
	}
}

// Once a session is deleted, no piece of its conversation is served any more, not even the later
// pieces of a read that was under way (held between its pieces) when it was deleted: a delete
// removes the session (docs/protocol.md §10).
func TestRead_DeletedSessionIsNotServedFromAHeldRead(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10, func(c *transfer.Config) { c.Engine.NoPack = true })
	ctx := ctxT(t)
	nc := env.Conn()
	corpus := corpusMessages(t, "claude_code_spotter_258c7280.json")
	for _, enc := range []string{wire.EncodingIdentity, wire.EncodingZstd} {
		t.Run(enc, func(t *testing.T) {
			key := checkpoint.Key{Session: "gone-" + enc}
			_, err := env.Client.Save(ctx, key, arrayOf(corpus))
			require.NoError(t, err)
			req := wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: key.Session}, Version: 1, Encoding: enc}
			data, _ := json.Marshal(req)
			m, err := nc.Request(wire.APISubject(wire.DefaultNamespace, wire.OpRead), data, 10e9)
			require.NoError(t, err)
			require.Empty(t, m.Header.Get(wire.HdrServiceErrorCode), "%s", m.Data)
			_, err = env.Client.Delete(ctx, key, nil)
			require.NoError(t, err)
			req.Offset = int64(len(m.Data))
			data, _ = json.Marshal(req)
			m, err = nc.Request(wire.APISubject(wire.DefaultNamespace, wire.OpRead), data, 10e9)
			require.NoError(t, err)
			require.Equal(t, "404", m.Header.Get(wire.HdrServiceErrorCode), "a piece of the deleted session was served: %.80s", m.Data)
		})
	}
}

// A prune drops the held reads of the sessions it removed versions from: the next piece of a read
// of a removed version is looked up again, and not found (it used to be served from the hold).
func TestRead_PrunedVersionIsNotServedFromAHeldRead(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10, func(c *transfer.Config) { c.Engine.NoPack = true })
	ctx := ctxT(t)
	nc := env.Conn()
	corpus := corpusMessages(t, "claude_code_spotter_258c7280.json")
	key := checkpoint.Key{Session: "pruned"}
	_, err := env.Client.Save(ctx, key, arrayOf(corpus[:len(corpus)-1]))
	require.NoError(t, err)
	_, err = env.Client.Save(ctx, key, arrayOf(corpus))
	require.NoError(t, err)
	req := wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: key.Session}, Version: 1}
	data, _ := json.Marshal(req)
	m, err := nc.Request(wire.APISubject(wire.DefaultNamespace, wire.OpRead), data, 10e9)
	require.NoError(t, err)
	require.Empty(t, m.Header.Get(wire.HdrServiceErrorCode), "%s", m.Data)
	_, err = env.Client.Prune(ctx, wire.DefaultNamespace, checkpoint.PruneOptions{Session: key.Session, KeepLast: 1})
	require.NoError(t, err)
	req.Offset = int64(len(m.Data))
	data, _ = json.Marshal(req)
	m, err = nc.Request(wire.APISubject(wire.DefaultNamespace, wire.OpRead), data, 10e9)
	require.NoError(t, err)
	require.Equal(t, "404", m.Header.Get(wire.HdrServiceErrorCode), "a piece of a pruned version was served: %.80s", m.Data)
}
