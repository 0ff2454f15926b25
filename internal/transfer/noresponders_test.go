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

	// The daemon goes away and another comes back a moment later (a reconnect, a restart).
	env.StopDaemon()
	conv = turn(conv, "agent", 2)
	done := make(chan error, 1)
	go func() {
		_, err := c.Save(ctx, key, conv)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // the save meets "no responders" meanwhile
	env.StartDaemon()
	require.NoError(t, <-done)
	require.Equal(t, before, queued(), "the save went by request, not to the ingest stream")
	require.Equal(t, 1.0, saveCount(t, env, "request", "ok"))

	// No daemon comes back: after the window the save falls back to the ingest stream.
	env.StopDaemon()
	conv = turn(conv, "agent", 3)
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
	got, v, err := c.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(3), v.Version)
	require.Equal(t, string(conv), string(got))
}
