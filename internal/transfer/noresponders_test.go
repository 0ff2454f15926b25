package transfer_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A client whose saves a daemon answered, and that then finds nobody subscribed to save requests,
// is most likely seeing the daemons reconnect (CI: TestCluster_Harness, a save sent 14 ms after the
// kill of the node both daemons were on went to the ingest stream): it asks again for a moment
// before falling back, and a daemon back within it answers the request. When none comes back in
// that window, the save falls back to the ingest stream as before: it is not lost.
func TestSDK_NoRespondersAfterAnAnswerIsAskedAgain(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	c := env.Client
	key := checkpoint.Key{Session: "daemons reconnecting"}
	conv := turn(nil, "agent", 1)
	_, err := c.Save(ctx, key, conv) // answered by a daemon
	require.NoError(t, err)

	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	ingest, err := js.Stream(ctx, wire.StreamIngest)
	require.NoError(t, err)
	queued := func() uint64 {
		info, err := ingest.Info(ctx)
		require.NoError(t, err)
		return info.State.LastSeq
	}
	before := queued()

	// The daemon goes away and another comes back a moment later (a reconnect, a restart). A
	// daemon slower to open than the window (a machine loaded by other tests) says nothing either
	// way: that round is tried again.
	done := make(chan error, 1)
	for round := 1; ; round++ {
		env.StopDaemon()
		conv = turn(conv, "agent", round+1)
		start := time.Now()
		go func() {
			_, err := c.Save(ctx, key, conv)
			done <- err
		}()
		time.Sleep(300 * time.Millisecond) // the save meets "no responders" meanwhile
		env.StartDaemon()
		opened := time.Since(start)
		require.NoError(t, <-done)
		took := time.Since(start)
		if now := queued(); now != before {
			if opened < time.Second {
				t.Fatalf("the save went to the ingest stream (took %s) though a daemon answered requests again %s after it was sent", took, opened)
			}
			if round == 3 {
				t.Skipf("a daemon took %s to open, longer than the SDK waits for one (the machine is loaded): nothing shown", opened)
			}
			before = now
			continue
		}
		require.Equal(t, 1.0, saveCount(t, env, "request", "ok"), "answered by the new daemon")
		break
	}

	// No daemon comes back: after the window the save falls back to the ingest stream.
	env.StopDaemon()
	conv = turn(conv, "agent", 100)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := c.Save(sctx, key, conv)
		done <- err
	}()
	require.Eventually(t, func() bool { return queued() > before }, 10*time.Second, 20*time.Millisecond,
		"the save is queued on the ingest stream")
	env.StartDaemon()
	require.NoError(t, <-done)
	got, _, err := c.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, string(conv), string(got))
}
