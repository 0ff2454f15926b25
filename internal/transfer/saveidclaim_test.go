package transfer_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Within a namespace, any writer may send a save under a save id another save already made a
// version with. Its refusal, save_id_reused, was announced on that save id's cp.saved subject (the
// other save's, which its watchers follow) and, for a chunked save, stored on its cp.result
// subject, in place of the other save's own result there (one per subject). It is now answered in
// the reply only. By raw NATS messages: a save request, a chunked one and a group.
func TestSave_ReusedSaveIDRefusalStaysOffTheOtherSavesSubjects(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	key := wire.Key{Session: "claimed"}.WithDefaults()
	mine := []byte(`[{"role":"user","content":"the first writer's"}]`)
	other := `[{"role":"user","content":"another conversation, under the same save id"}]`

	// The first writer's saves: one as a request, one off the ingest stream (its result stored).
	res := saveRawHeader(t, nc, js, key, "request", "first-1", nil, mine)
	require.True(t, res.OK, "%+v", res.Error)
	res = saveRawHeader(t, nc, js, key, "ingest", "first-2", nil, mine)
	require.True(t, res.OK, "%+v", res.Error)
	watch, err := nc.SubscribeSync(strings.TrimSuffix(wire.SavedSubject(key.Namespace, "x"), "x") + ">")
	require.NoError(t, err)
	t.Cleanup(func() { _ = watch.Unsubscribe() })
	require.NoError(t, nc.Flush())

	// Another writer reuses those save ids.
	res = saveRawHeader(t, nc, js, key, "request", "first-1", nil, []byte(other))
	requireRefused(t, res, wire.CodeSaveIDReused)
	for i, piece := range []string{other[:30], other[30:]} {
		c := nats.NewMsg(wire.ChunkSubject(key.Namespace, "first-2"))
		c.Header.Set(wire.HdrChunk, strconv.Itoa(i))
		c.Data = []byte(piece)
		_, err := js.PublishMsg(ctx, c)
		require.NoError(t, err)
	}
	res = saveRawHeader(t, nc, js, key, "request", "first-2", nats.Header{wire.HdrChunks: {"2"}}, nil)
	requireRefused(t, res, wire.CodeSaveIDReused)
	rep := requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: "1"},
		groupBody(groupItem{fields: [][2]string{{wire.HdrSaveID, "first-1"}}, body: []byte(other)}))
	require.Nil(t, rep.Error)
	require.Len(t, rep.Results, 1)
	require.Equal(t, wire.CodeSaveIDReused, rep.Results[0].Error.Code)

	require.NoError(t, nc.Flush())
	if m, err := watch.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a refusal announced on the other save's subject %s: %s", m.Subject, m.Data)
	}
	results, err := js.Stream(ctx, wire.StreamResults)
	require.NoError(t, err)
	stored, err := results.GetLastMsgForSubject(ctx, wire.ResultSubject(key.Namespace, "first-2"))
	require.NoError(t, err)
	var kept wire.SaveResult
	require.NoError(t, json.Unmarshal(stored.Data, &kept))
	require.True(t, kept.OK, "the first writer's stored result is still there: %s", stored.Data)
}
