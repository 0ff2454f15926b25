package logstore

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// A leader get answered "stream not found" (10059) is ErrUnavailable, not a hard error: in a
// cluster the meta leader answers so while it holds no assignment of the stream, which was there
// before and is after (TestCluster_Harness: "lease-1: resume: logstore: last entry of
// cp.log.default.leased.main: stream leader get ...: stream not found (JetStream 404/10059)"), and
// the caller is told to retry, as a direct get nobody answers already was. A real server's 10059
// here comes from a stream deleted under the Log (the only way to make one answer it at will).
func TestLog_LeaderGetStreamNotFoundIsUnavailable(t *testing.T) {
	nc, _ := startServer(t)
	ctx := context.Background()
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	leader := openFresh(t, nc, LogConfig{Stream: "CP_LOG_GONE", LeaderReads: true})
	direct := openFresh(t, nc, LogConfig{Stream: "CP_LOG_GONE"})
	seq, err := leader.Append(ctx, k, []byte("entry"), 0)
	require.NoError(t, err)

	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(ctx, "CP_LOG_GONE"))

	_, err = leader.Last(ctx, k)
	require.ErrorIs(t, err, engine.ErrUnavailable, "leader get: %v", err)
	require.Contains(t, err.Error(), "stream not found")
	_, err = leader.Get(ctx, k, seq)
	require.ErrorIs(t, err, engine.ErrUnavailable, "leader get: %v", err)
	_, err = direct.Last(ctx, k)
	require.ErrorIs(t, err, engine.ErrUnavailable, "direct get, as before: %v", err)
}
