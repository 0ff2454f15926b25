package transfer_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A refusal quotes the header value it refuses. 60 KiB of control bytes, quoted (\x01) and then
// escaped as JSON (\\x01), made a refusal of ~300 KB: on a server whose max_payload is lower (here
// 64 KiB, which the request itself fits), the server refused the reply and the writer heard nothing;
// off the ingest stream, the result was never stored and the save was retried forever. The refusal
// is now cut to fit, and says so; nothing is stored, and the daemon keeps serving.
func TestRefusal_QuotingHugeHeadersFitsALoweredMaxPayload(t *testing.T) {
	const maxPayload = 64 << 10
	env := testenv.StartWithMaxPayload(t, maxPayload)
	nc := env.Conn()
	key := wire.Key{Session: "huge-header"}.WithDefaults()
	hostileSave := func(subject, saveID string) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Header.Set(wire.HdrSaveID, saveID)
		m.Header.Set(wire.HdrMsgID, saveID)
		m.Header.Set(wire.HdrReason, strings.Repeat("\x01", 60<<10))
		m.Data = []byte(`[{"role":"user","content":"hi"}]`)
		return m
	}
	requireCutRefusal := func(data []byte) {
		t.Helper()
		require.LessOrEqual(t, len(data), maxPayload)
		var res wire.SaveResult
		require.NoError(t, json.Unmarshal(data, &res))
		require.False(t, res.OK)
		require.NotNil(t, res.Error)
		require.Equal(t, wire.CodeBadRequest, res.Error.Code)
		require.Contains(t, res.Error.Message, wire.HdrReason, "it says what it refuses")
		require.Contains(t, res.Error.Message, "cut to fit max_payload")
	}

	// Sent as a request (cp.save).
	reply, err := nc.RequestMsg(hostileSave(wire.SaveSubject(key), "request-1"), 5*time.Second)
	require.NoError(t, err, "every request gets an answer")
	requireCutRefusal(reply.Data)

	// Sent on the ingest stream: the refusal is stored on its result subject.
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	sub, err := nc.SubscribeSync(wire.ResultSubject(key.Namespace, "stream-1"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	_, err = js.PublishMsg(ctxT(t), hostileSave(wire.IngestSubject(key), "stream-1"))
	require.NoError(t, err, "JetStream takes the save: from here on it must be answered")
	result, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err, "the refusal is published")
	requireCutRefusal(result.Data)

	// Nothing stored, and the daemon still serves.
	_, err = env.Client.Get(ctxT(t), checkpoint.Key{Session: key.Session}, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
	_, err = env.Client.Save(ctxT(t), checkpoint.Key{Session: key.Session}, []byte(`[{"role":"user","content":"hi"}]`))
	require.NoError(t, err)
}

// The same in a group: a shared header (Cp-Dialect) or an item's field (Cp-Reason) of kilobytes of
// control bytes refuses the group's first save, whose result quotes it; a Cp-Group that is not a
// count refuses the whole group, quoting it.
func TestRefusal_GroupQuotingHugeHeadersFitsALoweredMaxPayload(t *testing.T) {
	const maxPayload = 64 << 10
	env := testenv.StartWithMaxPayload(t, maxPayload)
	nc := env.Conn()
	key := wire.Key{Session: "huge-group-header"}.WithDefaults()
	huge := strings.Repeat("\x01", 60<<10)
	items := []groupItem{appendItem("group-1", 0, oneMessage("u", 1)), appendItem("group-2", 1, oneMessage("u", 2))}
	for _, tc := range []struct {
		name  string
		hdr   map[string]string
		items []groupItem
		whole bool // the group is refused whole
	}{
		{"shared dialect", map[string]string{wire.HdrGroup: "2", wire.HdrDialect: huge}, items, false},
		{"item reason", map[string]string{wire.HdrGroup: "2"}, []groupItem{
			{fields: append(items[0].fields, [2]string{wire.HdrReason, huge[:30<<10]}), body: items[0].body}, items[1]}, false},
		{"group count", map[string]string{wire.HdrGroup: huge}, items, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := requestGroup(t, nc, wire.SaveSubject(key), tc.hdr, groupBody(tc.items...))
			refusal := rep.Error
			if !tc.whole {
				require.Nil(t, rep.Error)
				require.Len(t, rep.Results, 2)
				refusal = rep.Results[0].Error
			}
			require.NotNil(t, refusal)
			require.Equal(t, wire.CodeBadRequest, refusal.Code)
			require.Contains(t, refusal.Message, "cut to fit max_payload")
		})
	}
	_, err := env.Client.Get(ctxT(t), checkpoint.Key{Session: key.Session}, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound, "nothing stored")
}

// A service request's error is quoted in its reply twice (Nats-Service-Error and the body): a lease
// op of 20,000 C1 control characters (40 KB sent), quoted (\u0085) and escaped, made a reply of
// ~260 KB, over a max_payload of 64 KiB, and the request went unanswered.
func TestRefusal_ServiceErrorQuotingHugeFieldFitsALoweredMaxPayload(t *testing.T) {
	const maxPayload = 64 << 10
	env := testenv.StartWithMaxPayload(t, maxPayload)
	body, err := json.Marshal(map[string]string{"session": "s", "op": strings.Repeat("\u0085", 20000)})
	require.NoError(t, err)
	reply, err := env.Conn().Request(wire.APISubject(wire.DefaultNamespace, "lease"), body, 5*time.Second)
	require.NoError(t, err, "every request gets an answer")
	require.LessOrEqual(t, len(reply.Data)+len(reply.Header.Get(wire.HdrServiceError)), maxPayload)
	require.Equal(t, "400", reply.Header.Get(wire.HdrServiceErrorCode))
	require.Contains(t, reply.Header.Get(wire.HdrServiceError), "cut to fit max_payload")
	var e wire.Error
	require.NoError(t, json.Unmarshal(reply.Data, &e))
	require.Equal(t, wire.CodeBadRequest, e.Code)
	require.Contains(t, e.Message, "lease op")
	require.Contains(t, e.Message, "cut to fit max_payload")
}
