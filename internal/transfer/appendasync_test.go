package transfer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// countRequests counts the save requests (single or group) on cp.save.>, on a connection of its
// own, and the saves they carry.
func countRequests(t *testing.T, env *testenv.Env) (requests, groups *atomic.Int64) {
	t.Helper()
	requests, groups = new(atomic.Int64), new(atomic.Int64)
	nc := env.Conn()
	_, err := nc.Subscribe(wire.SaveSubjectPrefix+">", func(m *nats.Msg) {
		requests.Add(1)
		if m.Header.Get(wire.HdrGroup) != "" {
			groups.Add(1)
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return requests, groups
}

// wholeOf is the conversation of the first n appends of oneMessage(who, i).
func wholeOf(who string, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = strings.TrimSuffix(strings.TrimPrefix(string(oneMessage(who, i)), "["), "]")
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// 200 appends of one session, none waited for: 200 versions in order, each the conversation so
// far byte for byte, sent in far fewer than 200 requests (the appends that queued while one
// request was in flight went together as the next).
func TestAppendAsync_GroupsABurstOfOneSession(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	requests, groups := countRequests(t, env)
	key := checkpoint.Key{Session: "burst"}
	const n = 200
	futures := make([]*checkpoint.AppendFuture, n)
	for i := range futures {
		futures[i] = env.Client.AppendAsync(ctx, key, oneMessage("b", i))
	}
	for i, f := range futures {
		v, err := f.Wait(ctx)
		require.NoError(t, err, "append %d", i)
		require.Equal(t, uint64(i+1), v.Version, "append %d", i)
	}
	for i := 0; i < n; i++ {
		got, v, err := env.Client.Restore(ctx, key, uint64(i+1))
		require.NoError(t, err)
		require.Equal(t, uint64(i+1), v.Version)
		require.Equal(t, wholeOf("b", i+1), string(got), "version %d", i+1)
	}
	require.Less(t, requests.Load(), int64(n/4), "requests sent for %d appends", n)
	require.Positive(t, groups.Load())
	t.Logf("%d appends in %d requests (%d groups)", n, requests.Load(), groups.Load())

	// More appends later go on from the head the client follows.
	v, err := env.Client.AppendAsync(ctx, key, oneMessage("b", n)).Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(n+1), v.Version)
}

// A refused append ends its session's run: its future has its refusal, every later one (sent in
// its group, queued, or asked for afterwards) fails as a conflict without being stored, until
// ExpectVersion restarts the run from the head.
func TestAppendAsync_AFailureEndsTheRunUntilRestarted(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "failing"}
	var futures []*checkpoint.AppendFuture
	for i := 0; i < 30; i++ {
		msg := oneMessage("f", i)
		if i == 10 {
			msg = []byte(`[{"role":"user","content":`)
		}
		futures = append(futures, env.Client.AppendAsync(ctx, key, msg))
	}
	for i, f := range futures {
		v, err := f.Wait(ctx)
		switch {
		case i < 10:
			require.NoError(t, err, "append %d", i)
			require.Equal(t, uint64(i+1), v.Version)
		case i == 10:
			require.ErrorIs(t, err, checkpoint.ErrInvalid, "append %d", i)
		default:
			require.ErrorIs(t, err, checkpoint.ErrConflict, "append %d", i)
		}
	}
	_, err := env.Client.AppendAsync(ctx, key, oneMessage("f", 99)).Wait(ctx)
	require.ErrorIs(t, err, checkpoint.ErrConflict, "the run stays ended")
	require.Contains(t, err.Error(), "ExpectVersion")
	head, err := env.Client.Get(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(10), head.Version, "nothing after the refused append was stored")

	v, err := env.Client.AppendAsync(ctx, key, oneMessage("f", 10), checkpoint.ExpectVersion(head.Version)).Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(11), v.Version)
	got, _, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, wholeOf("f", 11), string(got))
}

// The daemon stops (gracefully, or its connection dies with a group in its hands, unanswered)
// while a session's appends are in flight, and comes back: every future resolves, each to its own
// version, in order, none lost and none stored twice (a group unanswered is sent again with the
// same save ids; while no daemon answers, the appends go one by one to the ingest stream).
func TestAppendAsync_DaemonRestartLosesNothing(t *testing.T) {
	for _, mode := range []string{"graceful", "crash"} {
		t.Run(mode, func(t *testing.T) {
			env := testenv.Start(t)
			var requests *atomic.Int64
			if mode == "crash" {
				// (Not while no daemon runs: a subscriber on cp.save.> would take the "no
				// responders" away from the writers, who then wait for a reply.)
				requests, _ = countRequests(t, env)
			}
			ingested := new(atomic.Int64)
			watcher := env.Conn()
			_, err := watcher.Subscribe(wire.IngestSubjectPrefix+">", func(*nats.Msg) { ingested.Add(1) })
			require.NoError(t, err)
			require.NoError(t, watcher.Flush())
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			key := checkpoint.Key{Session: "restart " + mode}
			const n = 600
			futures := make([]*checkpoint.AppendFuture, n)
			var sent int64
			for i := range futures {
				futures[i] = env.Client.AppendAsync(ctx, key, oneMessage("r", i))
				switch {
				case i == n/3 && mode == "graceful":
					_, err := futures[i/2].Wait(ctx) // some are stored, many in flight or queued
					require.NoError(t, err)
					env.StopDaemon()
				case i == n/3:
					_, err := futures[i].Wait(ctx)
					require.NoError(t, err)
					// The daemon will take the next request and hold it, waiting for memory.
					release := transfer.HoldIngestBudget(env.Daemon, time.Minute)
					t.Cleanup(release)
					sent = requests.Load()
				case i == n/2 && mode == "crash":
					require.Eventually(t, func() bool { return requests.Load() > sent }, 10*time.Second, time.Millisecond)
					time.Sleep(50 * time.Millisecond) // taken by the daemon, and held
					env.CrashDaemon()                 // which dies without answering it
					env.StartDaemon()
				case i == n/2:
					// Meanwhile the appends went to the ingest stream, one by one.
					require.Eventually(t, func() bool { return ingested.Load() > 0 }, 10*time.Second, time.Millisecond)
					env.StartDaemon()
				}
			}
			for i, f := range futures {
				v, err := f.Wait(ctx)
				require.NoError(t, err, "append %d", i)
				require.Equal(t, uint64(i+1), v.Version, "append %d", i)
			}
			hist, err := env.Client.History(ctx, key)
			require.NoError(t, err)
			require.Len(t, hist, n)
			got, _, err := env.Client.Restore(ctx, key, 0)
			require.NoError(t, err)
			require.Equal(t, wholeOf("r", n), string(got))
		})
	}
}

// Appends of many sessions at once each keep their own order.
func TestAppendAsync_SessionsKeepTheirOwnOrder(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	const sessions, each = 8, 40
	futures := map[int][]*checkpoint.AppendFuture{}
	for i := 0; i < each; i++ {
		for s := 0; s < sessions; s++ {
			futures[s] = append(futures[s], env.Client.AppendAsync(ctx, checkpoint.Key{Session: fmt.Sprint("s", s)}, oneMessage(fmt.Sprint("s", s), i)))
		}
	}
	for s := 0; s < sessions; s++ {
		for i, f := range futures[s] {
			v, err := f.Wait(ctx)
			require.NoError(t, err)
			require.Equal(t, uint64(i+1), v.Version)
		}
		got, _, err := env.Client.Restore(ctx, checkpoint.Key{Session: fmt.Sprint("s", s)}, 0)
		require.NoError(t, err)
		require.Equal(t, wholeOf(fmt.Sprint("s", s), each), string(got))
	}
}

// A daemon before groups (simulated by a responder that answers as it did: a group is a save
// without Cp-Save-Id, refused bad_request in a single save's result) makes the client send the
// saves one by one; each still resolves to its own version.
func TestAppendAsync_OlderDaemonGetsTheSavesOneByOne(t *testing.T) {
	env := testenv.Start(t)
	env.StopDaemon()
	ctx := ctxT(t)
	nc := env.Conn()
	var groups, singles atomic.Int64
	head := uint64(0)
	_, err := nc.QueueSubscribe(wire.SaveSubjectPrefix+">", wire.ServiceName, func(m *nats.Msg) {
		key, _ := wire.ParseToken(strings.TrimPrefix(m.Subject, wire.SaveSubjectPrefix))
		res := wire.SaveResult{Key: key, SaveID: m.Header.Get(wire.HdrSaveID)}
		if res.SaveID == "" {
			groups.Add(1)
			res.Error = &wire.Error{Code: wire.CodeBadRequest, Message: "bad request: header Cp-Save-Id: missing"}
		} else {
			singles.Add(1)
			head++
			res.OK, res.Received = true, wire.Hash(m.Data)
			res.Version = &wire.Version{Key: key, Version: head, SaveID: res.SaveID}
		}
		data, _ := json.Marshal(res)
		_ = m.Respond(data)
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	key := checkpoint.Key{Session: "older"}
	futures := []*checkpoint.AppendFuture{env.Client.AppendAsync(ctx, key, oneMessage("o", 0), checkpoint.ExpectVersion(0))}
	for i := 1; i < 20; i++ {
		futures = append(futures, env.Client.AppendAsync(ctx, key, oneMessage("o", i)))
	}
	for i, f := range futures {
		v, err := f.Wait(ctx)
		require.NoError(t, err, "append %d", i)
		require.Equal(t, uint64(i+1), v.Version)
	}
	require.Positive(t, groups.Load(), "a group was tried")
	require.Equal(t, int64(20), singles.Load())
}

// Over a loopback connection (the embedded server on 127.0.0.1, as here) a group's items travel
// as they are, even those past DefaultCompressFrom: the request is never stored as sent,
// and the daemon compresses what it stores anyway (docs/format.md §8.15q). Seen on the wire by a
// subscriber of its own; each append is stored byte for byte.
func TestAppendAsync_LoopbackItemsTravelUncompressed(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	encodings := make(chan string, 64)
	_, err := nc.Subscribe(wire.SaveSubjectPrefix+">", func(m *nats.Msg) {
		if m.Header.Get(wire.HdrGroup) == "" {
			// An append found alone in its session's queue goes as a single save (§4.0), which
			// over loopback travels as it is too (§8.15r).
			encodings <- m.Header.Get(wire.HdrEncoding)
			return
		}
		k, err := wire.ParseGroupCount(m.Header.Get(wire.HdrGroup))
		if err != nil {
			encodings <- "bad group count: " + err.Error()
			return
		}
		items, err := wire.ParseGroup(m.Data, k)
		if err != nil {
			encodings <- "bad group: " + err.Error()
			return
		}
		for _, it := range items {
			encodings <- strings.Join(it.Fields[wire.HdrEncoding], ",")
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	key := checkpoint.Key{Session: "loopback-large"}
	large := func(i int) []byte { // ~40 KiB, past DefaultCompressFrom (32 KiB)
		return []byte(fmt.Sprintf(`[{"role":"user","content":"%d %s"}]`, i, strings.Repeat("x", 40<<10)))
	}
	const n = 3
	futures := make([]*checkpoint.AppendFuture, n)
	for i := range futures {
		futures[i] = env.Client.AppendAsync(ctx, key, large(i))
	}
	for i, f := range futures {
		_, err := f.Wait(ctx)
		require.NoError(t, err, "append %d", i)
	}
	for range n {
		select {
		case enc := <-encodings:
			require.Equal(t, wire.EncodingIdentity, enc, "an item's Cp-Encoding over loopback")
		case <-time.After(10 * time.Second):
			t.Fatal("fewer items seen than appends sent")
		}
	}
	got, v, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(n), v.Version)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = strings.TrimSuffix(strings.TrimPrefix(string(large(i)), "["), "]")
	}
	require.Equal(t, "["+strings.Join(parts, ",")+"]", string(got), "the conversation of the %d appends", n)
}
