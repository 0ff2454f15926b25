package transfer_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/checkpointd/checkpointd/internal/wire"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func requireSameConversation(t *testing.T, want, got []byte) {
	t.Helper()
	testenv.RequireSameConversation(t, want, got)
}

func corpusFiles(t testing.TB) []string {
	files, err := filepath.Glob("../../testdata/corpus/*.json")
	require.NoError(t, err)
	require.Len(t, files, 8, "the corpus has eight transcripts")
	return files
}

func TestDaemon_CorpusRoundTripAcrossRestart(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	want := map[string][]byte{}
	for _, f := range corpusFiles(t) {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		key := checkpoint.Key{Session: filepath.Base(f)}
		v, err := env.Client.Save(ctx, key, data)
		require.NoError(t, err, f)
		require.Equal(t, uint64(1), v.Version)
		want[key.Session] = data
	}

	env.Restart()

	restored := 0
	for session, data := range want {
		got, v, err := env.Client.Restore(ctx, checkpoint.Key{Session: session}, 0)
		require.NoError(t, err, session)
		requireSameConversation(t, data, got)
		require.Equal(t, int64(len(got)), v.RawBytes)
		restored++
	}
	require.Equal(t, 8, restored)
	t.Logf("corpus round trip: %d of %d files restored identical after a restart", restored, len(want))
}

func TestDaemon_FidelityOfUglyInput(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	img := make([]byte, 3<<20) // incompressible: forces the chunked path past NATS's 1 MiB max payload
	_, _ = rand.Read(img)
	big := strings.Repeat("line of tool output with ünïcödé ✓ and \\\"quotes\\\"\\n", 100_000) // ~5 MiB
	conv := fmt.Sprintf(`[
	 {"role":"user","content":"plain string content 😀 שלום e\u0301","timestamp":1700000000000,"x-unknown":{"nested":[1,2,{"deep":true}]}},
	 {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"abc=="},{"type":"toolCall","id":"t1","name":"read","arguments":{"path":"/a b/c","n":123456789012345678901234567890}}],
	  "stopReason":"toolUse","model":"m","provider":"p","usage":{"input":9007199254740993,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":9007199254740994,"cost":{"total":0.017400000000000002}},"timestamp":1.5e12},
	 {"role":"toolResult","toolCallId":"t1","toolName":"read","content":[{"type":"text","text":"%s"},{"type":"image","data":"%s","mimeType":"image/png"}],"isError":false,"details":{"z":1,"a":2}},
	 {"role":"extension","kind":"compaction","data":{"summary":"\u0000\ud83d\ude00 escapes stay escapes","tokensBefore":-0.0000000000000000001}}
	]`, big, base64.StdEncoding.EncodeToString(img))

	v, err := env.Client.Save(ctx, checkpoint.Key{Session: "ugly"}, []byte(conv))
	require.NoError(t, err)
	require.Greater(t, v.RawBytes, int64(8<<20))
	require.Equal(t, 4, v.Counts.Messages)

	env.Restart()
	got, _, err := env.Client.Restore(ctx, checkpoint.Key{Session: "ugly"}, 0)
	require.NoError(t, err)
	requireSameConversation(t, []byte(conv), got)
	require.Contains(t, string(got), `123456789012345678901234567890`)
	require.Contains(t, string(got), `9007199254740993`)
	require.Contains(t, string(got), `\u0000\ud83d\ude00`)
}

func TestDaemon_HostileIDsRoundTrip(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	keys := []checkpoint.Key{
		{Namespace: "user@example.com", Session: "user@example.com/a.b*c >d", Agent: "planner.*"},
		{Namespace: "tenant 1", Session: ">", Agent: "*"},
		{Namespace: "tenant 1", Session: "..", Agent: "=41"}, // '=' is the escape character itself
		{Namespace: "ünï", Session: "会话\t\n", Agent: "🙂"},
		{Session: "$JS.API.STREAM.DELETE.CP_INGEST"},
	}
	for i, k := range keys {
		conv := fmt.Sprintf(`[{"role":"user","content":"message %d"}]`, i)
		_, err := env.Client.Save(ctx, k, []byte(conv))
		require.NoError(t, err, "%+v", k)
		got, v, err := env.Client.Restore(ctx, k, 0)
		require.NoError(t, err)
		require.Equal(t, conv, string(got))
		require.Equal(t, k.WithDefaults(), v.Key)
	}
	all, err := env.Client.ListAll(ctx)
	require.NoError(t, err)
	require.Len(t, all, len(keys), "each hostile id is its own session; none leaked into another")
	inTenant, err := env.Client.List(ctx, "tenant 1")
	require.NoError(t, err)
	require.Len(t, inTenant, 2)
}

func TestDaemon_ConflictOnStaleExpectedVersion(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "s"}
	conv := func(n int) []byte {
		return []byte(fmt.Sprintf(`[{"role":"user","content":"turn %d"}]`, n))
	}
	v1, err := env.Client.Save(ctx, key, conv(1), checkpoint.ExpectVersion(0))
	require.NoError(t, err)
	_, err = env.Client.Save(ctx, key, conv(2), checkpoint.ExpectVersion(v1.Version))
	require.NoError(t, err)

	_, err = env.Client.Save(ctx, key, conv(3), checkpoint.ExpectVersion(v1.Version))
	require.ErrorIs(t, err, checkpoint.ErrConflict)
	var ce *checkpoint.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, uint64(2), ce.Head, "the conflict names the current head")
	require.Contains(t, ce.Message, "head is version 2")

	_, err = env.Client.Save(ctx, checkpoint.Key{Session: "new"}, conv(1), checkpoint.ExpectVersion(3))
	require.ErrorIs(t, err, checkpoint.ErrConflict)

	got, head, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(2), head.Version)
	require.Equal(t, string(conv(2)), string(got), "the refused save changed nothing")
}

func TestDaemon_DuplicateSaveCreatesOneVersion(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "dup"}
	conv := []byte(`[{"role":"user","content":"hi"}]`)

	t.Run("same save id through the client", func(t *testing.T) {
		a, err := env.Client.Save(ctx, key, conv, checkpoint.WithSaveID("turn-1"))
		require.NoError(t, err)
		b, err := env.Client.Save(ctx, key, conv, checkpoint.WithSaveID("turn-1"))
		require.NoError(t, err)
		require.Equal(t, a, b)
	})
	t.Run("same Nats-Msg-Id published raw twice", func(t *testing.T) {
		js, err := jetstream.New(env.NC)
		require.NoError(t, err)
		for i := 0; i < 2; i++ {
			m := nats.NewMsg(wire.IngestSubject(key.WithDefaults()))
			m.Header.Set(wire.HdrSaveID, "raw-1")
			m.Data = []byte(`[{"role":"user","content":"hi"},{"role":"user","content":"again"}]`)
			ack, err := js.PublishMsg(ctx, m, jetstream.WithMsgID("raw-1"))
			require.NoError(t, err)
			require.Equal(t, i == 1, ack.Duplicate)
		}
	})
	hist, err := env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, hist, 2, "two distinct saves, each stored once")
	require.Equal(t, []uint64{1, 2}, []uint64{hist[0].Version, hist[1].Version})
	require.Equal(t, uint64(1), hist[1].Parent)
	require.Equal(t, "raw-1", hist[1].SaveID)
}

// A save acknowledged by JetStream while no daemon runs is served once one starts: the restore waits
// for it rather than answering with the older head.
func TestDaemon_ReadYourWritesAfterCrash(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "crash"}
	_, err := env.Client.Save(ctx, key, []byte(`[{"role":"user","content":"one"}]`))
	require.NoError(t, err)

	env.StopDaemon()
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	m := nats.NewMsg(wire.IngestSubject(key.WithDefaults()))
	m.Header.Set(wire.HdrSaveID, "while-down")
	m.Data = []byte(`[{"role":"user","content":"one"},{"role":"user","content":"two"}]`)
	_, err = js.PublishMsg(ctx, m, jetstream.WithMsgID("while-down"))
	require.NoError(t, err, "the publish is acknowledged once durable, daemon or not")

	env.Restart() // the server restarts too: the queued save survived on disk
	got, v, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(2), v.Version)
	require.Equal(t, string(m.Data), string(got))
}

func TestDaemon_HistoryAndGet(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Namespace: "team", Session: "h", Agent: "coder"}
	var convs []string
	for i := 1; i <= 5; i++ {
		c := fmt.Sprintf(`[{"role":"user","content":"turn %d"}]`, i)
		convs = append(convs, c)
		_, err := env.Client.Save(ctx, key, []byte(c), checkpoint.WithReason(wire.ReasonManual))
		require.NoError(t, err)
	}
	hist, err := env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, hist, 5)
	for i, v := range hist {
		require.Equal(t, uint64(i+1), v.Version)
		require.Equal(t, uint64(i), v.Parent)
		require.Equal(t, "manual", v.Reason)
		require.NotEmpty(t, v.Writer)
		got, _, err := env.Client.Restore(ctx, key, v.Version)
		require.NoError(t, err)
		require.Equal(t, convs[i], string(got))
	}
	_, err = env.Client.Get(ctx, key, 6)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
	_, err = env.Client.Get(ctx, checkpoint.Key{Session: "nope"}, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
	_, err = env.Client.History(ctx, checkpoint.Key{Session: "nope"})
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
}

// Bad input gets a typed error naming what and where; the daemon keeps serving and nothing already
// stored changes.
func TestDaemon_BadInputIsRefusedAndHarmless(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.MaxCheckpointBytes = 4 << 20 })
	ctx := ctxT(t)
	good := checkpoint.Key{Session: "good"}
	goodConv := []byte(`[{"role":"user","content":"keep me"}]`)
	before, err := env.Client.Save(ctx, good, goodConv)
	require.NoError(t, err)

	cases := []struct {
		name  string
		key   checkpoint.Key
		conv  string
		want  error
		index int
		field string
	}{
		{"truncated JSON", good, `[{"role":"user","content":"a"`, checkpoint.ErrInvalid, -1, ""},
		{"not an array", good, `{"role":"user"}`, checkpoint.ErrInvalid, -1, ""},
		{"unknown role", good, `[{"role":"user","content":"a"},{"role":"system2","content":"b"}]`, checkpoint.ErrInvalid, 1, "role"},
		{"unknown content type", good, `[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"video","url":"x"}]}]`, checkpoint.ErrInvalid, 0, "content[1].type"},
		{"malformed usage", good, `[{"role":"assistant","content":[],"usage":{"input":"12"}}]`, checkpoint.ErrInvalid, 0, "usage.input"},
		{"empty session id", checkpoint.Key{Session: ""}, `[]`, checkpoint.ErrBadRequest, -1, ""},
		{"invalid UTF-8 id", checkpoint.Key{Session: "\xff\xfe"}, `[]`, checkpoint.ErrBadRequest, -1, ""},
		{"oversize id", checkpoint.Key{Session: strings.Repeat("x", 300)}, `[]`, checkpoint.ErrBadRequest, -1, ""},
		{"oversize payload", good, `[{"role":"user","content":"` + strings.Repeat("a", 5<<20) + `"}]`, checkpoint.ErrTooLarge, -1, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := env.Client.Save(ctx, tc.key, []byte(tc.conv))
			require.ErrorIs(t, err, tc.want)
			var ce *checkpoint.Error
			require.ErrorAs(t, err, &ce)
			require.NotEmpty(t, ce.Message)
			if tc.index >= 0 {
				require.Equal(t, tc.index, ce.Index)
				require.Equal(t, tc.field, ce.Field)
				require.Contains(t, ce.Message, fmt.Sprintf("message %d", tc.index))
				require.Contains(t, ce.Message, tc.field)
			}
		})
	}

	t.Run("unknown format header", func(t *testing.T) {
		js, err := jetstream.New(env.NC)
		require.NoError(t, err)
		sub, err := env.NC.SubscribeSync(wire.ResultSubject(wire.DefaultNamespace, "fmt-9"))
		require.NoError(t, err)
		m := nats.NewMsg(wire.IngestSubject(good.WithDefaults()))
		m.Header.Set(wire.HdrSaveID, "fmt-9")
		m.Header.Set(wire.HdrFormat, "9")
		m.Data = goodConv
		_, err = js.PublishMsg(ctx, m)
		require.NoError(t, err)
		res, err := sub.NextMsg(10 * time.Second)
		require.NoError(t, err)
		var sr wire.SaveResult
		require.NoError(t, json.Unmarshal(res.Data, &sr))
		require.NotNil(t, sr.Error)
		require.Equal(t, wire.CodeUnknownFormat, sr.Error.Code)
		require.Contains(t, sr.Error.Message, "9")
	})

	t.Run("unknown stored format version", func(t *testing.T) {
		// A record from a future checkpointd: refused loudly on read, never misread.
		key := checkpoint.Key{Session: "from-the-future"}
		_, err := env.Client.Save(ctx, key, goodConv)
		require.NoError(t, err)
		// The session's last entry again, as a future format would write it ("CPL9").
		k := key.WithDefaults()
		subject := "cp.log." + wire.EncodeID(k.Namespace) + "." + wire.EncodeID(k.Session) + "." + wire.EncodeID(k.Agent)
		js, err := jetstream.New(env.NC)
		require.NoError(t, err)
		st, err := js.Stream(ctx, edge.LogStream)
		require.NoError(t, err)
		last, err := st.GetLastMsgForSubject(ctx, subject)
		require.NoError(t, err)
		_, err = js.Publish(ctx, subject, append([]byte("CPL9"), last.Data[4:]...))
		require.NoError(t, err)

		_, _, err = env.Client.Restore(ctx, key, 0)
		require.ErrorIs(t, err, checkpoint.ErrUnknownFormat)
		require.Contains(t, err.Error(), "CPL9")
	})

	require.True(t, env.Daemon.Ready(), "the daemon is still serving")
	got, after, err := env.Client.Restore(ctx, good, 0)
	require.NoError(t, err)
	require.Equal(t, before, after, "no refused save touched the stored session")
	require.Equal(t, string(goodConv), string(got))
	_, err = env.Client.Save(ctx, checkpoint.Key{Session: "still works"}, goodConv)
	require.NoError(t, err)
}

func TestDaemon_ClientWithoutDaemonIsUnavailable(t *testing.T) {
	env := testenv.Start(t)
	env.StopDaemon()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := env.Client.Get(ctx, checkpoint.Key{Session: "x"}, 0)
	require.ErrorIs(t, err, checkpoint.ErrUnavailable)
	assert.Contains(t, err.Error(), "is the daemon running")
	require.False(t, errors.Is(err, checkpoint.ErrNotFound))
}

// Histories and listings longer than one message come in pages, transparently to the client.
func TestDaemon_LongHistoryAndListingArePaged(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "long"}
	conv := []byte("[]")
	for i := 0; i < 400; i++ {
		conv = turn(conv, "me", i)
		_, err := env.Client.Save(ctx, key, conv)
		require.NoError(t, err)
	}
	for i := 0; i < 300; i++ {
		_, err := env.Client.Save(ctx, checkpoint.Key{Session: fmt.Sprintf("s%03d", i)}, []byte(`[]`))
		require.NoError(t, err)
	}
	h, err := env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, h, 400, "more than 64 KiB of version records")
	for i, v := range h {
		require.Equal(t, uint64(i+1), v.Version)
	}
	list, err := env.Client.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, list, 301)

	var rep wire.HistoryReply
	m, err := env.Conn().Request(wire.APISubject("default", wire.OpHistory), []byte(`{"session":"long"}`), 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(m.Data, &rep))
	require.True(t, rep.More, "one reply does not hold them all")
	require.Less(t, len(rep.Versions), 400)

	// Newest first, by cursor: every version once, from the head down; limit bounds a page. A
	// cursor past the versions since the last pack names the pack its page ended in (the next page
	// is walked from there, not from the head).
	var newest []uint64
	hinted := 0
	req := wire.HistoryRequest{SessionRequest: wire.SessionRequest{Session: "long"}, NewestFirst: true, Limit: 50}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 400, "the cursor moves on")
		rep = wire.HistoryReply{}
		requestJSON(t, env, wire.OpHistory, req, &rep)
		for _, v := range rep.Versions {
			newest = append(newest, v.Version)
		}
		if !rep.More {
			require.Empty(t, rep.Cursor)
			break
		}
		require.NotEmpty(t, rep.Cursor)
		if strings.Contains(rep.Cursor, ".") {
			hinted++
		}
		req.Cursor = rep.Cursor
	}
	require.Len(t, newest, 400)
	for i, v := range newest {
		require.Equal(t, uint64(400-i), v)
	}
	require.NotZero(t, hinted, "deep cursors carry their pack")
	// A cursor's pack is the client's to send: a stale or forged one only costs a walk from the head.
	for _, cursor := range []string{"300", "300.1", "300.99999"} {
		rep = wire.HistoryReply{}
		requestJSON(t, env, wire.OpHistory, wire.HistoryRequest{SessionRequest: wire.SessionRequest{Session: "long"}, NewestFirst: true, Limit: 2, Cursor: cursor}, &rep)
		require.Len(t, rep.Versions, 2, cursor)
		require.Equal(t, []uint64{299, 298}, []uint64{rep.Versions[0].Version, rep.Versions[1].Version}, cursor)
	}
	for _, cursor := range []string{"300.", "300.0", "300.01", ".5", "1", "300.5.5", "300.-1"} {
		m, err := env.Conn().Request(wire.APISubject("default", wire.OpHistory),
			[]byte(`{"session":"long","newestFirst":true,"cursor":"`+cursor+`"}`), 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "400", m.Header.Get(wire.HdrServiceErrorCode), "%s: %s", cursor, m.Data)
		require.Contains(t, string(m.Data), "cursor", cursor)
	}
	rep = wire.HistoryReply{}
	requestJSON(t, env, wire.OpHistory, wire.HistoryRequest{SessionRequest: wire.SessionRequest{Session: "long"}, NewestFirst: true, Limit: 3}, &rep)
	require.Equal(t, []uint64{400, 399, 398}, []uint64{rep.Versions[0].Version, rep.Versions[1].Version, rep.Versions[2].Version})
	require.Len(t, rep.Versions, 3)
	require.True(t, rep.More)

	// Listings page by cursor, in the order the sessions were created.
	var listed []string
	lreq := wire.ListRequest{}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 301, "the cursor moves on")
		var lrep wire.ListReply
		requestJSON(t, env, wire.OpList, lreq, &lrep)
		for _, h := range lrep.Sessions {
			listed = append(listed, h.Key.Session)
		}
		if !lrep.More {
			break
		}
		require.NotEmpty(t, lrep.Cursor)
		lreq.Cursor = lrep.Cursor
	}
	want := []string{"long"}
	for i := 0; i < 300; i++ {
		want = append(want, fmt.Sprintf("s%03d", i))
	}
	require.Equal(t, want, listed, "every session once, in creation order")

	// What a client of the old protocol sent, and cursors this daemon never gave, are refused naming what.
	for _, body := range []string{`{"offset": 5}`, `{"cursor": "nonsense"}`, `{"cursor": "` + wire.EncodeID("other") + `.5"}`} {
		m, err := env.Conn().Request(wire.APISubject("default", wire.OpList), []byte(body), 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "400", m.Header.Get(wire.HdrServiceErrorCode), "%s: %s", body, m.Data)
		require.Contains(t, string(m.Data), "cursor", body)
	}
}

// requestJSON sends req to op of the default namespace and decodes the reply into rep.
func requestJSON(t *testing.T, env *testenv.Env, op string, req, rep any) {
	t.Helper()
	body, err := json.Marshal(req)
	require.NoError(t, err)
	m, err := env.Conn().Request(wire.APISubject("default", op), body, 5*time.Second)
	require.NoError(t, err)
	require.Empty(t, m.Header.Get(wire.HdrServiceErrorCode), "%s", m.Data)
	require.NoError(t, json.Unmarshal(m.Data, rep))
}

// A NATS server where checkpointd never ran: a save says so (after a short wait for an election
// that is not coming), rather than retrying until its deadline.
func TestDaemon_SaveWithoutAnyCheckpointdSaysSo(t *testing.T) {
	ns, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	c, err := checkpoint.Connect(ns.ClientURL(), nil)
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.Save(ctx, checkpoint.Key{Session: "x"}, []byte(`[]`))
	require.ErrorIs(t, err, checkpoint.ErrUnavailable)
	require.Contains(t, err.Error(), "has checkpointd ever started on this server?")
	require.NoError(t, ctx.Err(), "refused well before the deadline")
}

// A NATS server whose max_payload leaves no room for pieces beside their headers is refused at
// start, saying which setting to raise (it used to say "store: chunk size must be positive").
func TestDaemon_TooSmallMaxPayloadSaysWhatToRaise(t *testing.T) {
	ns, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", MaxPayload: 16 << 10})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	cfg := transfer.DefaultConfig()
	cfg.Logger, cfg.Metrics = slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry())
	_, err = transfer.Open(context.Background(), nc, cfg)
	require.ErrorContains(t, err, "max_payload is 16384 bytes; checkpointd needs at least 32768")
	require.ErrorContains(t, err, "raise max_payload")
}

// Open returns once the server has the daemon's subscriptions: a save or a read asked right after
// it is answered by the daemon, not refused for want of responders (which made the SDK fall back
// to the slower ingest stream).
func TestDaemon_OpenReturnsSubscribed(t *testing.T) {
	env := testenv.Start(t)
	for i := 0; i < 20; i++ {
		env.StopDaemon()
		env.StartDaemon()
		for _, subject := range []string{wire.SaveSubject(wire.Key{Namespace: wire.DefaultNamespace, Session: "s", Agent: "a"})} {
			sz, err := env.Server.Subsz(&server.SubszOptions{Subscriptions: true, Test: subject})
			require.NoError(t, err)
			require.NotEmpty(t, sz.Subs, "restart %d: no subscription on %s when Open returned", i, subject)
		}
	}
}
