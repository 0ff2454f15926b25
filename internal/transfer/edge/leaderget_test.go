package edge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A leader get tells "no such message" (10037: a large save's chunk missing, which refuses the
// save) from "stream not found" (10059), which a cluster's meta leader answers while it holds no
// assignment of a stream that is there (see errCodeStreamNotFound): that is storage unavailable,
// retried, never a missing message. A real server's 10059 comes here from a stream deleted under
// the reader (the only way to make one answer it at will).
func TestReader_LeaderGetStreamNotFoundIsUnavailableNotMissing(t *testing.T) {
	s, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "leaderget"})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "GONE", Subjects: []string{"gone.>"}})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "gone.a", []byte("one"))
	require.NoError(t, err)

	r := edge.NewReader(nc, true)
	m, err := r.Next(ctx, st, 1, "gone.a")
	require.NoError(t, err)
	require.Equal(t, "one", string(m.Data))
	_, err = r.Next(ctx, st, m.Sequence+1, "gone.a")
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "no message after it")

	require.NoError(t, js.DeleteStream(ctx, "GONE"))
	_, err = r.Next(ctx, st, 1, "gone.a")
	require.ErrorIs(t, err, edge.ErrUnavailable, "%v", err)
	require.NotErrorIs(t, err, jetstream.ErrMsgNotFound)
	require.True(t, edge.IsTransient(err))
	_, err = r.Last(ctx, st, "gone.a")
	require.ErrorIs(t, err, edge.ErrUnavailable, "%v", err)
}

// A cluster electing a leader answers API requests 10008, "JetStream system temporarily
// unavailable" (TestRun_Cluster: creating CP_LOG at start-up under load): the daemon's start-up
// retries it, and a request's refusal says unavailable, as for any election.
func TestIsTransient_ClusterNotAvailable(t *testing.T) {
	err := fmt.Errorf("logstore: creating stream CP_LOG: %w",
		&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"})
	require.True(t, edge.IsTransient(err))
	require.Equal(t, wire.CodeUnavailable, edge.ToWireError(err).Code)
	require.False(t, edge.IsTransient(&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use"}))
}
