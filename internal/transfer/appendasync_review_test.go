package transfer_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
)

// A producer much faster than the daemon (here: a daemon holding the session's request, waiting
// for memory) does not queue without bound: once 1024 appends of the session wait to be sent,
// AppendAsync waits for room, as long as its ctx allows. An append whose ctx ends while waiting is
// not queued: its future says why (the context's error, typed unavailable), and the session's
// run ends there (a later append would be stored without its messages), until restarted with
// ExpectVersion once the pending ones are answered. Every append queued before it is stored, in
// order, none lost or doubled; and no goroutine is left behind.
func TestAppendAsync_AProducerFasterThanTheDaemonWaitsForRoom(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	client := env.Client
	key := checkpoint.Key{Session: "fast producer"}
	goroutines := runtime.NumGoroutine()
	release := transfer.HoldIngestBudget(env.Daemon, time.Minute)
	t.Cleanup(release)

	const queued = 16 * 64 // the queue's bound, in appends
	futures := []*checkpoint.AppendFuture{client.AppendAsync(ctx, key, oneMessage("p", 0))}
	// The first goes out alone and is held by the daemon; the next ones queue behind it.
	time.Sleep(100 * time.Millisecond)
	for i := 1; i <= queued; i++ {
		futures = append(futures, client.AppendAsync(ctx, key, oneMessage("p", i)))
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	blocked := client.AppendAsync(short, key, oneMessage("p", -1))
	waited := time.Since(start)
	select {
	case <-blocked.Done():
	default:
		t.Fatalf("AppendAsync returned after %s with %d appends queued, its future pending: the queue has no bound", waited, queued)
	}
	require.GreaterOrEqual(t, waited, 250*time.Millisecond, "it waited for room")
	_, err := blocked.Wait(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, checkpoint.ErrUnavailable)
	_, err = client.AppendAsync(ctx, key, oneMessage("p", -2)).Wait(ctx)
	require.ErrorIs(t, err, checkpoint.ErrConflict, "the run ended with the append not queued")

	release()
	for i, f := range futures {
		v, err := f.Wait(ctx)
		require.NoError(t, err, "append %d", i)
		require.Equal(t, uint64(i+1), v.Version, "append %d", i)
	}
	got, _, err := client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, wholeOf("p", queued+1), string(got))
	v, err := client.AppendAsync(ctx, key, oneMessage("p", queued+1), checkpoint.ExpectVersion(queued+1)).Wait(ctx)
	require.NoError(t, err, "restarted from the head")
	require.Equal(t, uint64(queued+2), v.Version)
	// The SDK's goroutines (the daemon's workers, in the same process, stay for the next request).
	require.Eventually(t, func() bool { return sdkGoroutines() == 0 }, 5*time.Second, 20*time.Millisecond,
		"goroutines: %d before, %d after, of the SDK's appends:\n%s", goroutines, runtime.NumGoroutine(), sdkStacks())
}

// sdkStacks are the stacks of the goroutines running the SDK's appends.
func sdkStacks() string {
	buf := make([]byte, 1<<22)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "checkpoint.(*Client).sendAppends") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

func sdkGoroutines() int {
	if s := sdkStacks(); s != "" {
		return strings.Count(s, "\n\n") + 1
	}
	return 0
}

// The user walks away mid-flight: the ctx of the append a group travels with is cancelled while
// the daemon holds that group, or the client is closed with appends in flight and queued. Every
// future resolves (none hangs), with a typed error, and no goroutine of the SDK is left; what was
// stored is a prefix of the appends, in order, none doubled.
func TestAppendAsync_EveryFutureResolvesWhenTheUserLeaves(t *testing.T) {
	for _, how := range []string{"ctx cancelled", "client closed"} {
		t.Run(how, func(t *testing.T) {
			env := testenv.Start(t)
			ctx := ctxT(t)
			client, err := checkpoint.Connect(env.URL(), nil)
			require.NoError(t, err)
			defer client.Close()
			key := checkpoint.Key{Session: how}
			release := transfer.HoldIngestBudget(env.Daemon, time.Minute)
			t.Cleanup(release)
			first, cancel := context.WithCancel(ctx)
			futures := []*checkpoint.AppendFuture{client.AppendAsync(first, key, oneMessage("u", 0))}
			time.Sleep(100 * time.Millisecond) // sent, and held by the daemon
			for i := 1; i < 200; i++ {
				futures = append(futures, client.AppendAsync(ctx, key, oneMessage("u", i)))
			}
			if how == "ctx cancelled" {
				cancel()
			} else {
				client.Close()
			}
			for i, f := range futures {
				wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
				_, err := f.Wait(wctx)
				wcancel()
				require.Error(t, err, "append %d", i)
				require.NotErrorIs(t, err, context.DeadlineExceeded, "append %d: its future never resolved", i)
				var ce *checkpoint.Error
				require.ErrorAs(t, err, &ce, "append %d: typed", i)
			}
			cancel()
			release()
			require.Eventually(t, func() bool { return sdkGoroutines() == 0 }, 5*time.Second, 20*time.Millisecond, "%s", sdkStacks())
			hist, err := env.Client.History(ctx, key)
			if err == nil {
				require.LessOrEqual(t, len(hist), 1, "at most the append in flight was stored")
			}
		})
	}
}

// The NATS server restarts with appends in flight and queued (the client's connection lost and
// back, the daemon's too): every future resolves; those that succeed are a prefix, in order,
// each its own version; the session holds exactly what was stored (no append doubled, nothing
// stored past the answered ones but the one group whose outcome a failure said was unknown).
func TestAppendAsync_ServerRestartMidFlight(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := checkpoint.Key{Session: "server restart"}
	const n = 400
	futures := make([]*checkpoint.AppendFuture, n)
	for i := range futures {
		futures[i] = env.Client.AppendAsync(ctx, key, oneMessage("s", i))
		if i == n/4 {
			_, err := futures[i/2].Wait(ctx)
			require.NoError(t, err)
			env.StopDaemon()
			env.Server.Shutdown()
			env.Server.WaitForShutdown()
			env.StartServer()
			env.StartDaemon()
		}
	}
	ok, failed := 0, 0
	for i, f := range futures {
		v, err := f.Wait(ctx)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "append %d: resolved", i)
		if err == nil {
			require.Zero(t, failed, "append %d stored after an earlier one failed", i)
			require.Equal(t, uint64(i+1), v.Version, "append %d", i)
			ok++
			continue
		}
		var ce *checkpoint.Error
		require.ErrorAs(t, err, &ce, "append %d: typed", i)
		if failed == 0 {
			t.Logf("append %d failed: %v", i, err)
		}
		failed++
	}
	head, err := env.Client.Get(ctx, key, 0)
	require.NoError(t, err)
	t.Logf("%d stored and answered, %d failed; head %d", ok, failed, head.Version)
	require.GreaterOrEqual(t, head.Version, uint64(ok))
	require.LessOrEqual(t, head.Version, uint64(ok+64))
	got, _, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, wholeOf("s", int(head.Version)), string(got), "each append once, in order")
}
