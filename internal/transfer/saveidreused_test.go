package transfer_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A save id sent again with another conversation, by any client (docs/protocol.md §4.3): the
// result is the refusal save_id_reused naming the version the save id made, with the received
// hash of the bytes sent this time, and nothing is stored. Before, the daemon answered the first
// save's version as a duplicate and the writer believed its other conversation stored.
func TestSave_SaveIDReusedForOtherConversation(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	first := []byte(`[{"role":"user","content":"first conversation"}]`)
	other := []byte(`[{"role":"user","content":"another conversation"}]`)
	spaced := []byte("[ {\"role\": \"user\", \"content\": \"first conversation\"} ]")

	t.Run("raw save requests", func(t *testing.T) {
		key := wire.Key{Namespace: "default", Session: "reused-raw", Agent: "main"}
		hdr := map[string]string{wire.HdrSaveID: "turn-1"}
		res := requestSave(t, env.NC, wire.SaveSubject(key), hdr, first)
		require.True(t, res.OK, "%+v", res.Error)
		made := res.Version.Version

		res = requestSave(t, env.NC, wire.SaveSubject(key), hdr, other)
		requireRefused(t, res, wire.CodeSaveIDReused, "turn-1", "another conversation")
		require.NotNil(t, res.Error.Version)
		require.Equal(t, made, *res.Error.Version, "the refusal names the version the save id made")
		require.Equal(t, wire.Hash(other), res.Received, "of the bytes sent this time")

		res = requestSave(t, env.NC, wire.SaveSubject(key), hdr, spaced)
		require.True(t, res.OK && res.Duplicate, "the same conversation sent another way is the duplicate: %+v", res.Error)
		require.Equal(t, made, res.Version.Version)

		// An append whose base is the version before: only the messages appended are compared.
		app := map[string]string{wire.HdrSaveID: "turn-2", wire.HdrBaseVersion: "1"}
		res = requestSave(t, env.NC, wire.SaveSubject(key), app, []byte(`[{"role":"user","content":"two"}]`))
		require.True(t, res.OK, "%+v", res.Error)
		res = requestSave(t, env.NC, wire.SaveSubject(key), app, []byte(`[{"role":"user","content":"TWO"}]`))
		requireRefused(t, res, wire.CodeSaveIDReused, "turn-2")
		require.Equal(t, uint64(2), *res.Error.Version)
		res = requestSave(t, env.NC, wire.SaveSubject(key), app, []byte(`[{"role":"user","content":"two"}]`))
		require.True(t, res.OK && res.Duplicate)
	})

	t.Run("raw saves on the ingest stream", func(t *testing.T) {
		key := wire.Key{Namespace: "default", Session: "reused-ingest", Agent: "main"}
		res := saveRaw(t, env.NC, key, "turn-1", nil, first)
		require.True(t, res.OK, "%+v", res.Error)
		made := res.Version.Version
		// The same save id under new message ids (JetStream drops a repeated one).
		res = publishSave(t, env.NC, key, "turn-1", "turn-1/other", other)
		requireRefused(t, res, wire.CodeSaveIDReused, "turn-1")
		require.Equal(t, made, *res.Error.Version)
		require.Equal(t, wire.Hash(other), res.Received)
		res = publishSave(t, env.NC, key, "turn-1", "turn-1/spaced", spaced)
		require.True(t, res.OK && res.Duplicate, "%+v", res.Error)
		require.Equal(t, made, res.Version.Version)
	})

	t.Run("on the ingest stream, beyond the engine's window", func(t *testing.T) {
		// Packs every 4 saves: after a dozen, version 1 is no longer among the records the engine
		// looks through; a save off the stream finds it by its stored result (prior), which must
		// check the bytes as well.
		env := testenv.Start(t, func(c *transfer.Config) { c.Engine.PackEntries = 4 })
		key := wire.Key{Namespace: "default", Session: "reused-far", Agent: "main"}
		res := saveRaw(t, env.NC, key, "turn-1", nil, first)
		require.True(t, res.OK, "%+v", res.Error)
		made := res.Version.Version
		for i := range 12 {
			app := map[string]string{wire.HdrSaveID: fmt.Sprint("later-", i), wire.HdrBaseVersion: fmt.Sprint(made + uint64(i))}
			res := requestSave(t, env.NC, wire.SaveSubject(key), app, []byte(fmt.Sprintf(`[{"role":"user","content":"later %d"}]`, i)))
			require.True(t, res.OK, "%+v", res.Error)
		}
		res = publishSave(t, env.NC, key, "turn-1", "turn-1/far-other", other)
		requireRefused(t, res, wire.CodeSaveIDReused, "turn-1")
		require.Equal(t, made, *res.Error.Version)
		res = publishSave(t, env.NC, key, "turn-1", "turn-1/far-spaced", spaced)
		require.True(t, res.OK && res.Duplicate, "%+v", res.Error)
		require.Equal(t, made, res.Version.Version)
	})

	t.Run("the Go SDK", func(t *testing.T) {
		key := checkpoint.Key{Session: "reused-sdk"}
		v, err := env.Client.Save(ctx, key, first, checkpoint.WithSaveID("turn-1"))
		require.NoError(t, err)
		_, err = env.Client.Save(ctx, key, other, checkpoint.WithSaveID("turn-1"))
		require.ErrorIs(t, err, checkpoint.ErrSaveIDReused)
		require.ErrorIs(t, err, checkpoint.ErrConflict, "a save id reused is a conflict with what is stored")
		var e *checkpoint.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, v.Version, e.Version)

		// Save sends what the array appends to its last save: the other tail under a save id
		// already used is refused too, and nothing is sent again as a whole array.
		grown := []byte(`[{"role":"user","content":"first conversation"},{"role":"user","content":"a"}]`)
		otherGrown := []byte(`[{"role":"user","content":"first conversation"},{"role":"user","content":"b"}]`)
		v, err = env.Client.Save(ctx, key, first, checkpoint.WithSaveID("turn-1"))
		require.NoError(t, err)
		v2, err := env.Client.Save(ctx, key, grown, checkpoint.WithSaveID("turn-2"))
		require.NoError(t, err)
		_, err = env.Client.Append(ctx, key, v.Version, []byte(`[{"role":"user","content":"b"}]`), checkpoint.WithSaveID("turn-2"))
		require.ErrorIs(t, err, checkpoint.ErrSaveIDReused)
		_, err = env.Client.Save(ctx, key, otherGrown, checkpoint.WithSaveID("turn-2"))
		require.ErrorIs(t, err, checkpoint.ErrSaveIDReused)
		_, err = env.Client.Get(ctx, key, v2.Version+1)
		require.ErrorIs(t, err, checkpoint.ErrNotFound, "nothing stored")
		again, err := env.Client.Save(ctx, key, grown, checkpoint.WithSaveID("turn-2"))
		require.NoError(t, err)
		require.Equal(t, v2, again)
	})
}

// publishSave publishes a save on the ingest stream with its own message id and returns its result.
func publishSave(t *testing.T, nc *nats.Conn, key wire.Key, saveID, msgID string, body []byte) wire.SaveResult {
	t.Helper()
	sub, err := nc.SubscribeSync(wire.ResultSubject(key.Namespace, saveID))
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	m := nats.NewMsg(wire.IngestSubject(key))
	m.Header.Set(wire.HdrSaveID, saveID)
	m.Data = body
	_, err = js.PublishMsg(ctxT(t), m, jetstream.WithMsgID(msgID))
	require.NoError(t, err)
	res, err := sub.NextMsg(15 * time.Second)
	require.NoError(t, err, "every acknowledged save gets a result")
	var sr wire.SaveResult
	require.NoError(t, json.Unmarshal(res.Data, &sr))
	return sr
}
