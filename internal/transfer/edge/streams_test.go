package edge_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// A daemon opening the streams another daemon made, with the same settings, sends no update: the
// server stores the settings checkpointd leaves unset with its defaults (no per-subject limit as
// -1, CP_RESULTS's dedup window as 2 min), which is no difference. An update is a request only the
// meta leader answers: the first result a daemon stored after the meta leader's death waited out
// the save's whole deadline on one (TestCluster_Harness). A setting that does differ is updated.
func TestEnsureStreams_OpeningUnchangedStreamsSendsNoUpdate(t *testing.T) {
	s, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "streams"})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Every update request that reaches the server, whoever sends it. The subscription is
	// synchronous: its messages are queued in the order they came, before a flush's answer.
	watch, err := nc.SubscribeSync("$JS.API.STREAM.UPDATE.>")
	require.NoError(t, err)
	t.Cleanup(func() { _ = watch.Unsubscribe() })
	require.NoError(t, nc.Flush())
	updates := func() int {
		require.NoError(t, nc.Flush())
		n, _, err := watch.Pending()
		require.NoError(t, err)
		return n
	}

	first, err := edge.EnsureStreams(ctx, js, 1, 24*time.Hour) // makes CP_INGEST and CP_CHUNKS
	require.NoError(t, err)
	_, err = first.Results(ctx, true) // the first result stored makes CP_RESULTS
	require.NoError(t, err)

	second, err := edge.EnsureStreams(ctx, js, 1, 24*time.Hour) // a second daemon, or a restart
	require.NoError(t, err)
	results, err := second.Results(ctx, false)
	require.NoError(t, err)
	require.NotNil(t, results)
	require.Zero(t, updates(), "streams with checkpointd's settings are opened as they are")

	// A setting that differs (the result TTL) is still updated.
	third, err := edge.EnsureStreams(ctx, js, 1, 12*time.Hour)
	require.NoError(t, err)
	results, err = third.Results(ctx, false)
	require.NoError(t, err)
	require.Equal(t, 12*time.Hour, results.CachedInfo().Config.MaxAge)
	require.Equal(t, 1, updates(), "only CP_RESULTS, whose MaxAge changed, is updated")
}
