package transfer_test

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// requestSave sends a save as a core NATS request on subject (docs/protocol.md §4.0), by hand, and
// returns the result the reply carries.
func requestSave(t *testing.T, nc *nats.Conn, subject string, hdr map[string]string, body []byte) wire.SaveResult {
	t.Helper()
	m := nats.NewMsg(subject)
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	m.Data = body
	reply, err := nc.RequestMsg(m, 10*time.Second)
	require.NoError(t, err, "a save request is answered")
	require.Empty(t, reply.Header.Get(wire.HdrServiceErrorCode), "the reply is the result, refusals included: %s", reply.Data)
	var res wire.SaveResult
	require.NoError(t, json.Unmarshal(reply.Data, &res), "the reply is a result: %s", reply.Data)
	return res
}

// Every save row of the hostile table, sent as a request instead of on the ingest stream: the same
// outcome, now in the reply, and nothing stored changes. A row that succeeds makes a new version
// (under a save id of its own: the ingest run of the table used the row's).
func TestHostile_SaveRowsAsRequests(t *testing.T) {
	h := startHostile(t)
	for i, row := range hostileRows(h) {
		if row.save == nil {
			continue
		}
		t.Run(row.name, func(t *testing.T) {
			if row.skip != "" && os.Getenv("CHECKPOINTD_HOSTILE_ALL") == "" {
				t.Skipf("%s (CHECKPOINTD_HOSTILE_ALL=1 runs it)", row.skip)
			}
			id := fmt.Sprintf("request-hostile-%d", i)
			if row.setup != nil {
				row.setup(t, h, id)
			}
			s := *row.save
			subject := cmpOr(s.subject, wire.IngestSubject(h.key("a")))
			subject = wire.SaveSubjectPrefix + strings.TrimPrefix(subject, wire.IngestSubjectPrefix)
			saveID := id
			if v, ok := s.headers[wire.HdrSaveID]; ok {
				saveID = v
				if row.want.code == "" {
					saveID = "request." + v
				}
			}
			for _, c := range s.chunks {
				m := nats.NewMsg(wire.ChunkSubject(wire.DefaultNamespace, saveID))
				m.Header.Set(wire.HdrChunk, c.index)
				m.Data = c.body
				_, err := h.js.PublishMsg(h.ctx, m)
				require.NoError(t, err, "chunk %s", c.index)
			}
			hdr := map[string]string{}
			if !s.noID {
				hdr[wire.HdrSaveID] = saveID
			}
			for k, v := range s.headers {
				hdr[k] = v
			}
			if !s.noID {
				hdr[wire.HdrSaveID] = saveID
			}
			res := requestSave(t, h.nc, subject, hdr, s.body)
			if row.want.code == "" {
				require.Nil(t, res.Error, "the save is stored")
				require.True(t, res.OK)
				require.False(t, res.Duplicate)
				require.Equal(t, saveID, res.SaveID)
				require.NotNil(t, res.Version)
			} else {
				require.False(t, res.OK, "refused, not stored: %+v", res.Version)
				require.NotNil(t, res.Error)
				h.requireError(t, res.Error, row.want)
			}
			h.requireUnharmed(t, id)
		})
	}
}

// A save sent as a request is answered once it is durable, with the same result as on the
// stream (version, received hash); the result is also announced live on cp.saved.<ns>.<saveid>
// (for watchers) but not stored on CP_RESULTS (the writer has it in its reply), a retry with the
// same save id is its duplicate, and both are counted as saves_total{path="request"}. The same
// holds for a chunked save, whose chunks are removed.
func TestSaveRequest_AnsweredWhenDurable(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10)
	ctx := ctxT(t)
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	key := checkpoint.Key{Session: "by request"}.WithDefaults()
	conv := turn(nil, "asker", 1)

	watch, err := nc.SubscribeSync(wire.SavedSubject(key.Namespace, "rq-1"))
	require.NoError(t, err)
	res := requestSave(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrSaveID: "rq-1"}, conv)
	require.True(t, res.OK, "%+v", res.Error)
	require.Equal(t, uint64(1), res.Version.Version)
	require.Equal(t, wire.Hash(conv), res.Received)
	require.Equal(t, key, res.Key)

	// Durable when answered: a restore right after it sees it.
	got, v, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), v.Version)
	require.Equal(t, string(conv), string(got))

	live, err := watch.NextMsg(5 * time.Second)
	require.NoError(t, err, "the result is published for watchers too")
	var published wire.SaveResult
	require.NoError(t, json.Unmarshal(live.Data, &published))
	require.Equal(t, res, published)

	again := requestSave(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrSaveID: "rq-1"}, conv)
	require.True(t, again.OK)
	require.True(t, again.Duplicate, "a retry with the same save id stores nothing new")
	require.Equal(t, uint64(1), again.Version.Version)

	// Chunked: the pieces go to CP_CHUNKS first, then the request says how many.
	big := bigConversation(200 << 10)
	body := codec.CompressZstd(big)
	const piece = 32 << 10
	res = requestSave(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrSaveID: "rq-chunked-2",
		wire.HdrChunks: "1", wire.HdrEncoding: wire.EncodingZstd}, nil)
	requireRefused(t, res, wire.CodeBadRequest, "missing")

	n := 0
	for i := 0; i < len(body); i += piece {
		m := nats.NewMsg(wire.ChunkSubject(key.Namespace, "rq-chunked-3"))
		m.Header.Set(wire.HdrChunk, fmt.Sprint(n))
		m.Data = body[i:min(i+piece, len(body))]
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
		n++
	}
	res = requestSave(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrSaveID: "rq-chunked-3",
		wire.HdrChunks: fmt.Sprint(n), wire.HdrEncoding: wire.EncodingZstd}, nil)
	require.True(t, res.OK, "%+v", res.Error)
	require.Equal(t, wire.Hash(big), res.Received)
	got, _, err = env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, string(big), string(got))
	chunks, err := js.Stream(ctx, wire.StreamChunks)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := chunks.GetLastMsgForSubject(ctx, wire.ChunkSubject(key.Namespace, "rq-chunked-3"))
		return err != nil
	}, 5*time.Second, 20*time.Millisecond, "the chunks of a settled request are removed")

	requestOK := opsSample(t, env.Registry, "checkpointd_saves_total", map[string]string{"path": "request", "result": "ok"})
	require.Equal(t, 2.0, requestOK)
	require.Equal(t, 1.0, opsSample(t, env.Registry, "checkpointd_saves_total", map[string]string{"path": "request", "result": "duplicate"}))
	require.Equal(t, 0.0, opsSample(t, env.Registry, "checkpointd_saves_total", map[string]string{"path": "ingest", "result": "ok"}))

	// Nothing of these requests (results, refusal, duplicate) was written on CP_RESULTS, which
	// is not even made (no files in the data directory) until a result is stored.
	_, err = js.Stream(ctx, wire.StreamResults)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "results of saves sent as requests are not stored")
}

// Headers beyond what JetStream takes on the ingest stream (64 KiB) are refused on the request
// path too, with a reply saying so.
func TestSaveRequest_HeadersBeyondJetStreamsLimitAreRefused(t *testing.T) {
	env := testenv.Start(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "huge headers"}.WithDefaults()
	res := requestSave(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrSaveID: "huge", "X-Junk": strings.Repeat("j", 200<<10)}, turn(nil, "x", 1))
	requireRefused(t, res, wire.CodeBadRequest, "headers of")
	require.Equal(t, "huge", res.SaveID)
	_, err := env.Client.Get(ctxT(t), key, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
}

// A save published without a reply subject is not acted on (nobody could learn its outcome, so it
// would be a save nobody acknowledged): nothing is stored, and it is counted as a bad request of
// the request path.
func TestSaveRequest_WithoutReplyIsNotActedOn(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "fire and forget"}.WithDefaults()
	m := nats.NewMsg(wire.SaveSubject(key))
	m.Header.Set(wire.HdrSaveID, "no-reply")
	m.Data = turn(nil, "nobody listens", 1)
	require.NoError(t, nc.PublishMsg(m))
	// A request after it, on the same connection, is handled after it.
	res := requestSave(t, nc, wire.SaveSubject(checkpoint.Key{Session: "after"}.WithDefaults()), map[string]string{wire.HdrSaveID: "after"}, turn(nil, "x", 1))
	require.True(t, res.OK)

	_, err := env.Client.Get(ctx, key, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound, "nothing stored")
	require.Equal(t, 1.0, opsSample(t, env.Registry, "checkpointd_saves_total", map[string]string{"path": "request", "result": "bad_request"}))
}

// A flood of save requests, far more than the daemon admits at once and with bodies that add up to
// 16 times its ingest memory, sent at once from raw NATS: each gets exactly one reply (stored, or
// refused busy with a retry hint); the bodies the daemon holds at once stay within its ingest
// memory (plus the one body that passes alone when nothing else is held); its connection is never
// cut as a slow consumer; and it keeps serving. (The heap growth is logged: it includes the
// server's buffers, which run in this process, and garbage not yet collected.)
func TestSaveRequest_FloodIsBoundedAndAnswered(t *testing.T) {
	const maxBytes, budget = 4 << 20, 1 << 20
	env := testenv.Start(t, func(c *transfer.Config) { c.MaxCheckpointBytes, c.IngestBudgetBytes = maxBytes, budget })
	ctx := ctxT(t)
	nc := env.Conn()
	// 800 requests of 64 KiB: 16 times the daemon's ingest memory, sent at once, and yet less than
	// nats.go's pending limit of its subscription (64 MiB), beyond which requests would be dropped
	// unanswered (their writers would send them again).
	body := bigConversation(64 << 10)
	const n = 800

	before := heapInUse()
	stop := make(chan struct{})
	peak := heapPeak(stop)
	inbox := nc.NewRespInbox()
	prefix := inbox[:strings.LastIndex(inbox, ".")+1]
	replies := make(chan *nats.Msg, n)
	sub, err := nc.ChanSubscribe(prefix+"*", replies)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	for i := range n {
		m := nats.NewMsg(wire.SaveSubject(checkpoint.Key{Session: fmt.Sprintf("flood-%d", i%50)}.WithDefaults()))
		m.Reply = prefix + fmt.Sprint(i)
		m.Header.Set(wire.HdrSaveID, fmt.Sprintf("flood-%d", i))
		m.Data = body
		require.NoError(t, nc.PublishMsg(m))
	}
	got := map[string]wire.SaveResult{}
	timeout := time.After(60 * time.Second)
	for len(got) < n {
		select {
		case m := <-replies:
			var res wire.SaveResult
			require.NoError(t, json.Unmarshal(m.Data, &res))
			_, dup := got[m.Subject]
			require.False(t, dup, "one reply per request (%s)", m.Subject)
			got[m.Subject] = res
		case <-timeout:
			t.Fatalf("%d of %d requests answered", len(got), n)
		}
	}
	close(stop)
	growth := int64(<-peak) - before
	codes := map[string]int{}
	for _, res := range got {
		switch {
		case res.OK:
			codes["ok"]++
		default:
			require.Equal(t, wire.CodeBusy, res.Error.Code, "%s", res.Error.Message)
			require.NotNil(t, res.Error.RetryAfterMillis)
			codes[res.Error.Code]++
		}
	}
	held := transfer.SaveRequestPeakBytes(env.Daemon)
	t.Logf("replies %v; request bodies held at most %.1f MiB; heap grew by %.1f MiB", codes, float64(held)/(1<<20), float64(growth)/(1<<20))
	require.Positive(t, codes["ok"])
	require.Positive(t, codes[wire.CodeBusy], "the flood was more than the daemon admits at once")
	require.LessOrEqual(t, held, int64(budget+len(body)+1024), "bodies held at once")
	for _, ev := range []string{"slow_consumer", "disconnect"} {
		require.Zero(t, opsSample(t, env.Registry, "checkpointd_nats_events_total", map[string]string{"event": ev}), ev)
	}

	v, err := env.Client.Save(ctx, checkpoint.Key{Session: "after the flood"}, turn(nil, "honest", 1))
	require.NoError(t, err, "the daemon keeps serving")
	require.Equal(t, uint64(1), v.Version)
}

// Closing the daemon answers every save request it received: the ones settling finish, the ones
// still queued in its subscription are settled too; a request sent after it stopped listening gets
// "no responders" (and the SDK falls back to the ingest stream). None goes unanswered.
func TestSaveRequest_ShutdownAnswersEveryRequest(t *testing.T) {
	env := testenv.Start(t)
	nc := env.Conn()
	const n = 400
	inbox := nc.NewRespInbox()
	prefix := inbox[:strings.LastIndex(inbox, ".")+1]
	replies := make(chan *nats.Msg, n)
	sub, err := nc.ChanSubscribe(prefix+"*", replies)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	stopped := make(chan struct{})
	for i := range n {
		m := nats.NewMsg(wire.SaveSubject(checkpoint.Key{Session: fmt.Sprintf("closing-%d", i%20)}.WithDefaults()))
		m.Reply = prefix + fmt.Sprint(i)
		m.Header.Set(wire.HdrSaveID, fmt.Sprintf("closing-%d", i))
		m.Data = turn(nil, "late", i)
		require.NoError(t, nc.PublishMsg(m))
		if i == n/4 {
			require.NoError(t, nc.Flush()) // the first quarter reached the daemon
			go func() { defer close(stopped); env.StopDaemon() }()
		}
	}
	<-stopped
	counts := map[string]int{}
	seen := map[string]bool{}
	timeout := time.After(20 * time.Second)
	for len(seen) < n {
		select {
		case m := <-replies:
			require.False(t, seen[m.Subject], "one reply per request (%s)", m.Subject)
			seen[m.Subject] = true
			if m.Header.Get("Status") == "503" {
				counts["no responders"]++
				continue
			}
			var res wire.SaveResult
			require.NoError(t, json.Unmarshal(m.Data, &res), "%s", m.Data)
			if res.OK {
				counts["ok"]++
			} else {
				counts[res.Error.Code]++
			}
		case <-timeout:
			t.Fatalf("%d of %d requests answered (%v)", len(seen), n, counts)
		}
	}
	t.Logf("outcomes: %v", counts)
	for o := range counts {
		require.Contains(t, []string{"ok", "no responders", wire.CodeUnavailable, wire.CodeBusy}, o, "every request is answered")
	}
	require.GreaterOrEqual(t, counts["ok"], n/4, "the requests received before the close are settled")
}

// heapInUse is the heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// saveCount is saves_total{path, result} of env's daemon.
func saveCount(t *testing.T, env *testenv.Env, path, result string) float64 {
	t.Helper()
	return opsSample(t, env.Registry, "checkpointd_saves_total", map[string]string{"path": path, "result": result})
}

// The SDK saves by request when a daemon answers: whole saves, appends, chunked saves, forks and
// imports all go that way, and nothing goes through the ingest stream.
func TestSDK_SavesGoByRequest(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10)
	ctx := ctxT(t)
	c := env.Client
	key := checkpoint.Key{Session: "sdk"}
	conv := turn(nil, "sdk", 1)
	v, err := c.Save(ctx, key, conv)
	require.NoError(t, err)
	conv = turn(conv, "sdk", 2)
	v, err = c.Save(ctx, key, conv) // sent as an append of what grew
	require.NoError(t, err)
	require.Equal(t, uint64(2), v.Version)
	_, err = c.Append(ctx, key, v.Version, []byte(`[{"role":"user","content":"appended"}]`))
	require.NoError(t, err)
	big := bigConversation(150 << 10) // chunked in a 64 KiB max_payload
	_, err = c.Save(ctx, checkpoint.Key{Session: "sdk big"}, big)
	require.NoError(t, err)
	_, err = c.Fork(ctx, key, 1, checkpoint.Key{Session: "sdk fork"})
	require.NoError(t, err)
	got, _, err := c.Restore(ctx, checkpoint.Key{Session: "sdk big"}, 0)
	require.NoError(t, err)
	require.Equal(t, string(big), string(got))

	require.Equal(t, 4.0, saveCount(t, env, "request", "ok")) // a fork is no save: the fork op (service/fork.go)
	require.Equal(t, 0.0, saveCount(t, env, "ingest", "ok"))
}

// With no daemon running, the SDK's save request finds no responders, and the save goes to the
// ingest stream: acknowledged there, it waits for a daemon, which settles it when it starts.
func TestSDK_SaveFallsBackToTheIngestStream(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "no daemon yet"}
	env.StopDaemon()
	done := make(chan error, 1)
	conv := turn(nil, "patient", 1)
	go func() {
		_, err := env.Client.Save(ctx, key, conv)
		done <- err
	}()
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	ingest, err := js.Stream(ctx, wire.StreamIngest)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := ingest.GetLastMsgForSubject(ctx, wire.IngestSubject(key.WithDefaults()))
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the save is queued on the ingest stream")
	env.StartDaemon()
	require.NoError(t, <-done)
	// Counted once acknowledged, just after its result was published.
	require.Eventually(t, func() bool { return saveCount(t, env, "ingest", "ok") == 1 }, 5*time.Second, 10*time.Millisecond)
	got, _, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, string(conv), string(got))
}

// A save request nobody answers in time (its reply lost, or the daemon that took it died) is sent
// again with the same save id; the first one, settled late, is then a duplicate, and one version
// is made.
func TestSDK_UnansweredSaveRequestIsSentAgain(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "lost reply"}
	env.StopDaemon()
	// Stands in for a daemon that takes the request and never answers.
	nc := env.Conn()
	swallowed := make(chan *nats.Msg, 1)
	sw, err := nc.Subscribe(wire.SaveSubjectPrefix+">", func(m *nats.Msg) {
		select {
		case swallowed <- m:
		default:
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	done := make(chan error, 1)
	go func() {
		_, err := env.Client.Save(ctx, key, turn(nil, "twice", 1), checkpoint.WithSaveID("sent-twice"))
		done <- err
	}()
	var first *nats.Msg
	select {
	case first = <-swallowed:
	case <-time.After(10 * time.Second):
		t.Fatal("the SDK sent no save request")
	}
	require.NoError(t, sw.Unsubscribe())
	env.StartDaemon()
	require.NoError(t, <-done, "the second request is answered")
	// The first request reaches a daemon after all: the same save, so nothing new.
	late, err := nc.RequestMsg(&nats.Msg{Subject: first.Subject, Header: first.Header, Data: first.Data}, 10*time.Second)
	require.NoError(t, err)
	var res wire.SaveResult
	require.NoError(t, json.Unmarshal(late.Data, &res))
	require.True(t, res.Duplicate, "%+v", res)
	hist, err := env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, hist, 1)
}

// A save request refused busy (the daemon's ingest memory is held) stored nothing, so the SDK
// sends it again after the wait the refusal hints at, and it goes through once memory is free. A
// chunked save too: its chunks are kept for the retry.
func TestSDK_BusySaveRequestIsRetried(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10)
	ctx := ctxT(t)
	for i, conv := range [][]byte{turn(nil, "patient", 1), bigConversation(150 << 10)} {
		release := transfer.HoldIngestBudget(env.Daemon, 20*time.Millisecond)
		time.AfterFunc(300*time.Millisecond, release)
		key := checkpoint.Key{Session: fmt.Sprintf("busy-%d", i)}
		v, err := env.Client.Save(ctx, key, conv)
		require.NoError(t, err)
		require.Equal(t, uint64(1), v.Version)
		require.Equal(t, float64(i+1), saveCount(t, env, "request", "busy"), "it was refused busy first")
		got, _, err := env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
		require.Equal(t, string(conv), string(got))
	}
}
