package transfer_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// groupItem is one save of a group as a test builds it: its fields and its body.
type groupItem struct {
	fields [][2]string
	body   []byte
}

// appendItem is an item appending body onto version base under save id id.
func appendItem(id string, base uint64, body []byte) groupItem {
	return groupItem{fields: [][2]string{{wire.HdrSaveID, id}, {wire.HdrBaseVersion, strconv.FormatUint(base, 10)}}, body: body}
}

// groupBody frames items as docs/protocol.md §4.0.1 says.
func groupBody(items ...groupItem) []byte {
	var b []byte
	for _, it := range items {
		b = wire.AppendGroupItem(b, it.fields, it.body)
	}
	return b
}

// requestGroup sends a group request by hand, with the raw body and headers given, and returns
// the reply it gets.
func requestGroup(t *testing.T, nc *nats.Conn, subject string, hdr map[string]string, body []byte) wire.GroupReply {
	t.Helper()
	m := nats.NewMsg(subject)
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	m.Data = body
	reply, err := nc.RequestMsg(m, 10*time.Second)
	require.NoError(t, err, "a group request is answered")
	var rep wire.GroupReply
	require.NoError(t, json.Unmarshal(reply.Data, &rep), "the reply is a group reply: %s", reply.Data)
	return rep
}

// oneMessage is a JSON array of one message.
func oneMessage(who string, n int) []byte {
	return []byte(fmt.Sprintf(`[{"role":"user","content":"%s %d"}]`, who, n))
}

// A group of k appends sent as one request is stored as k consecutive versions, each restorable
// as the whole conversation so far; the reply holds their k results in order (each checked as a
// single save's: save id, key, received hash), each is announced on cp.saved, and each counts as
// a save of the request path.
func TestSaveGroup_StoresEachSaveInOrder(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "group"}.WithDefaults()
	watch, err := nc.SubscribeSync(strings.TrimSuffix(wire.SavedSubject(key.Namespace, "x"), "x") + "*")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	const k = 5
	var items []groupItem
	for i := 0; i < k; i++ {
		items = append(items, appendItem(fmt.Sprintf("g-%d", i), uint64(i), oneMessage("m", i)))
	}
	rep := requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: strconv.Itoa(k)}, groupBody(items...))
	require.Nil(t, rep.Error)
	require.Len(t, rep.Results, k)
	whole := "["
	for i, res := range rep.Results {
		require.Nil(t, res.Error, "save %d", i)
		require.True(t, res.OK)
		require.Equal(t, fmt.Sprintf("g-%d", i), res.SaveID)
		require.Equal(t, key, res.Key)
		require.Equal(t, uint64(i+1), res.Version.Version)
		require.Equal(t, wire.Hash(oneMessage("m", i)), res.Received)
		if i > 0 {
			whole += ","
		}
		whole += strings.TrimSuffix(strings.TrimPrefix(string(oneMessage("m", i)), "["), "]")
		got, _, err := env.Client.Restore(ctx, key, uint64(i+1))
		require.NoError(t, err)
		require.Equal(t, whole+"]", string(got), "version %d", i+1)
	}
	for i := 0; i < k; i++ {
		m, err := watch.NextMsg(5 * time.Second)
		require.NoError(t, err, "result %d announced", i)
		var res wire.SaveResult
		require.NoError(t, json.Unmarshal(m.Data, &res))
		require.Equal(t, rep.Results[i], res)
	}
	require.Equal(t, float64(k), opsSample(t, env.Registry, "checkpointd_saves_total", map[string]string{"path": "request", "result": "ok"}))

	// Sent again whole (a lost reply): k duplicates, nothing new.
	again := requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: strconv.Itoa(k)}, groupBody(items...))
	require.Nil(t, again.Error)
	for i, res := range again.Results {
		require.True(t, res.OK && res.Duplicate, "save %d: %+v", i, res.Error)
		require.Equal(t, uint64(i+1), res.Version.Version)
	}
	head, err := env.Client.Get(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(k), head.Version)
}

// A refused save in the middle of a group: those before it are stored, it gets its own refusal
// (naming it), and those after it are refused as conflicts without being stored.
func TestSaveGroup_BadSaveInTheMiddle(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	for _, c := range []struct {
		name string
		bad  func(base uint64) groupItem
		code string
		says string
	}{
		{"invalid messages", func(base uint64) groupItem { return appendItem("bad", base, []byte(`[{"role":"user","content":`)) }, wire.CodeInvalid, "group save 2"},
		{"unknown reason", func(base uint64) groupItem {
			it := appendItem("bad", base, oneMessage("x", 2))
			it.fields = append(it.fields, [2]string{wire.HdrReason, "whim"})
			return it
		}, wire.CodeBadRequest, "Cp-Reason"},
		{"no save id", func(base uint64) groupItem {
			return groupItem{fields: [][2]string{{wire.HdrBaseVersion, strconv.FormatUint(base, 10)}}, body: oneMessage("x", 2)}
		}, wire.CodeBadRequest, "Cp-Save-Id"},
		{"wrong base", func(base uint64) groupItem { return appendItem("bad", base+7, oneMessage("x", 2)) }, wire.CodeConflict, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := checkpoint.Key{Session: "middle " + c.name}.WithDefaults()
			items := []groupItem{appendItem("a", 0, oneMessage("x", 0)), appendItem("b", 1, oneMessage("x", 1)), c.bad(2),
				appendItem("d", 3, oneMessage("x", 3)), appendItem("e", 4, oneMessage("x", 4))}
			rep := requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: "5"}, groupBody(items...))
			require.Nil(t, rep.Error)
			require.Len(t, rep.Results, 5)
			for i := 0; i < 2; i++ {
				require.True(t, rep.Results[i].OK, "save %d stored: %+v", i, rep.Results[i].Error)
				require.Equal(t, uint64(i+1), rep.Results[i].Version.Version)
			}
			requireRefused(t, rep.Results[2], c.code, c.says)
			for i := 3; i < 5; i++ {
				requireRefused(t, rep.Results[i], wire.CodeConflict, "an earlier save of the group was refused")
				require.Equal(t, string(rune('a'+i)), rep.Results[i].SaveID)
			}
			head, err := env.Client.Get(ctx, key, 0)
			require.NoError(t, err)
			require.Equal(t, uint64(2), head.Version, "nothing after the refused save was stored")
		})
	}
}

// Hostile groups, sent as raw requests: each is refused whole with a bad_request saying what and
// where, nothing is stored, and the daemon keeps serving. Counts and lengths are checked against
// the bytes received before anything is taken, so a count of a billion costs nothing. A group
// cannot mix sessions: an item has no field naming one (the subject's session is every item's).
func TestSaveGroup_HostileGroupsAreRefusedWhole(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "hostile group"}.WithDefaults()
	ok := appendItem("ok", 0, oneMessage("x", 0))
	many := make([]groupItem, 65)
	for i := range many {
		many[i] = appendItem(fmt.Sprint("m", i), uint64(i), oneMessage("x", i))
	}
	for _, c := range []struct {
		name string
		hdr  map[string]string
		body []byte
		says []string
	}{
		{"a count of a billion, a tiny body", map[string]string{wire.HdrGroup: "1000000000"}, groupBody(ok), []string{"Cp-Group", "1..64"}},
		{"65 saves", map[string]string{wire.HdrGroup: "65"}, groupBody(many...), []string{"Cp-Group", "1..64"}},
		{"count 0", map[string]string{wire.HdrGroup: "0"}, nil, []string{"Cp-Group"}},
		{"count with a leading zero", map[string]string{wire.HdrGroup: "02"}, groupBody(ok, ok), []string{"Cp-Group"}},
		{"fewer saves than the count", map[string]string{wire.HdrGroup: "64"}, groupBody(ok), []string{"save 1", "missing"}},
		{"more bytes than the count's saves", map[string]string{wire.HdrGroup: "1"}, groupBody(ok, ok), []string{"bytes after its 1 saves"}},
		{"a body length beyond the body", map[string]string{wire.HdrGroup: "1"}, []byte("21 4000000000\r\nCp-Save-Id: x\r\n" + `[{"role":"user"}]`), []string{"save 0", "body bytes 4000000000", "left"}},
		{"a field length beyond the body", map[string]string{wire.HdrGroup: "1"}, []byte("99999 2\r\nCp-Save-Id: x\r\n[]"), []string{"save 0", "field bytes 99999"}},
		{"a negative length", map[string]string{wire.HdrGroup: "1"}, []byte("-1 2\r\n[]"), []string{"save 0", "plain decimal"}},
		{"no length line", map[string]string{wire.HdrGroup: "1"}, []byte(strings.Repeat("9", 200)), []string{"save 0", "missing"}},
		{"an item naming another session", map[string]string{wire.HdrGroup: "1"},
			groupBody(groupItem{fields: [][2]string{{wire.HdrSaveID, "x"}, {"Cp-Session", "victim"}}, body: oneMessage("x", 0)}), []string{"save 0", "Cp-Session"}},
		{"a chunked item", map[string]string{wire.HdrGroup: "1"},
			groupBody(groupItem{fields: [][2]string{{wire.HdrSaveID, "x"}, {wire.HdrChunks, "3"}}}), []string{"save 0", "Cp-Chunks", "alone"}},
		{"a field twice", map[string]string{wire.HdrGroup: "1"},
			groupBody(groupItem{fields: [][2]string{{wire.HdrSaveID, "x"}, {wire.HdrSaveID, "y"}}, body: oneMessage("x", 0)}), []string{"save 0", "twice"}},
		{"a save's header on the request", map[string]string{wire.HdrGroup: "1", wire.HdrSaveID: "outer"}, groupBody(ok), []string{"header Cp-Save-Id on a group"}},
		{"chunks on the request", map[string]string{wire.HdrGroup: "1", wire.HdrChunks: "2"}, nil, []string{"header Cp-Chunks on a group"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := requestGroup(t, nc, wire.SaveSubject(key), c.hdr, c.body)
			require.Empty(t, rep.Results)
			require.NotNil(t, rep.Error)
			require.Equal(t, wire.CodeBadRequest, rep.Error.Code, rep.Error.Message)
			for _, s := range c.says {
				require.Contains(t, rep.Error.Message, s)
			}
			_, err := env.Client.Get(ctx, key, 0)
			require.ErrorIs(t, err, checkpoint.ErrNotFound, "nothing stored")
		})
	}
	// A group whose reply subject is no inbox is answered there, as a single save is; and the
	// daemon still serves.
	sub, err := nc.SubscribeSync("not.an.inbox")
	require.NoError(t, err)
	m := nats.NewMsg(wire.SaveSubject(key))
	m.Reply = "not.an.inbox"
	m.Header.Set(wire.HdrGroup, "1")
	m.Data = groupBody(ok)
	require.NoError(t, nc.PublishMsg(m))
	reply, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	var rep wire.GroupReply
	require.NoError(t, json.Unmarshal(reply.Data, &rep))
	require.Len(t, rep.Results, 1)
	require.True(t, rep.Results[0].OK, "%+v", rep.Results[0].Error)
	v, err := env.Client.Save(ctx, checkpoint.Key{Session: "after"}, oneMessage("y", 0))
	require.NoError(t, err)
	require.Equal(t, uint64(1), v.Version)
}

// A group that finds no memory to read its saves is refused busy whole, nothing stored, with a
// hint of when to come back; the SDK sends it again until it goes through.
func TestSaveGroup_BusyIsRefusedWholeAndRetried(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "busy group"}.WithDefaults()
	release := transfer.HoldIngestBudget(env.Daemon, 20*time.Millisecond)
	rep := requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: "2"},
		groupBody(appendItem("a", 0, oneMessage("x", 0)), appendItem("b", 1, oneMessage("x", 1))))
	require.Empty(t, rep.Results)
	require.NotNil(t, rep.Error)
	require.Equal(t, wire.CodeBusy, rep.Error.Code, rep.Error.Message)
	require.NotNil(t, rep.Error.RetryAfterMillis)
	_, err := env.Client.Get(ctx, key, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound, "nothing stored")

	var futures []*checkpoint.AppendFuture
	for i := 0; i < 50; i++ {
		futures = append(futures, env.Client.AppendAsync(ctx, key, oneMessage("x", i)))
	}
	time.AfterFunc(300*time.Millisecond, release)
	for i, f := range futures {
		v, err := f.Wait(ctx)
		require.NoError(t, err, "append %d", i)
		require.Equal(t, uint64(i+1), v.Version)
	}
	require.Positive(t, opsSample(t, env.Registry, "checkpointd_saves_total", map[string]string{"path": "request", "result": "busy"}))
}

// With tenants, a group is a save request like any other: it reaches only the login's own
// namespace (another's save subject has no responders), its reply goes back to the requester's
// account wherever the reply subject points, and the SDK's AppendAsync works through the imports
// a login already has.
func TestTenancy_SaveGroups(t *testing.T) {
	f, e := startTenancy(t)
	bobC := e.Client(f.asBob(t))
	before := tenSessionState(t, bobC, tenBobKey)
	alice, err := e.Conn(asAlice())
	require.NoError(t, err)
	group := func(subject, reply string, ids ...string) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Reply = reply
		m.Header.Set(wire.HdrGroup, strconv.Itoa(len(ids)))
		var items []groupItem
		for _, id := range ids {
			items = append(items, groupItem{fields: [][2]string{{wire.HdrSaveID, id}}, body: []byte(`[{"role":"user","content":"alice-marker"}]`)})
		}
		m.Data = groupBody(items...)
		return m
	}
	_, err = alice.RequestMsg(group(wire.SaveSubject(tenBobKey), "", "g1", "g2"), 5*time.Second)
	require.ErrorIs(t, err, nats.ErrNoResponders, "another namespace's save subject does not exist for alice")

	stolen := checkpoint.Key{Namespace: "bob", Session: "stolen", Agent: "main"}
	for i, reply := range []string{wire.IngestSubject(stolen), "$JS.API.STREAM.PURGE." + wire.StreamIngest} {
		sub, err := alice.SubscribeSync(reply)
		require.NoError(t, err)
		require.NoError(t, alice.PublishMsg(group(wire.SaveSubject(tenAliceKey), reply, fmt.Sprint("deputy-a", i), fmt.Sprint("deputy-b", i))))
		got, err := sub.NextMsg(5 * time.Second)
		require.NoError(t, err, "the reply aimed at %s", reply)
		var rep wire.GroupReply
		require.NoError(t, json.Unmarshal(got.Data, &rep))
		require.Len(t, rep.Results, 2)
		for _, res := range rep.Results {
			require.True(t, res.OK, "%+v", res.Error)
			require.Equal(t, tenAliceKey, res.Key)
		}
		require.NoError(t, sub.Unsubscribe())
	}
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, before, tenSessionState(t, bobC, tenBobKey))
	_, err = bobC.Get(tenCtx(t), stolen, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)

	aliceC := e.Client(asAlice())
	key := checkpoint.Key{Namespace: "alice", Session: "async"}
	var futures []*checkpoint.AppendFuture
	for i := 0; i < 40; i++ {
		futures = append(futures, aliceC.AppendAsync(tenCtx(t), key, oneMessage("a", i)))
	}
	for i, fu := range futures {
		v, err := fu.Wait(tenCtx(t))
		require.NoError(t, err)
		require.Equal(t, uint64(i+1), v.Version)
	}
}
