package transfer_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The SDK retries a busy reply after the daemon's hint, and gives up with ErrBusy (saying how long
// it tried) when the caller's deadline comes first. A raw NATS responder plays a daemon that is busy
// a given number of times: the test is of the protocol as a client sees it.
func TestClient_RetriesBusyWithinItsDeadline(t *testing.T) {
	ns, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	defer nc.Close()

	var asked, busyFor atomic.Int64
	busyFor.Store(3)
	hint := int64(20)
	_, err = nc.Subscribe(wire.APISubject(wire.DefaultNamespace, wire.OpGet), func(m *nats.Msg) {
		if asked.Add(1) <= busyFor.Load() {
			body, _ := json.Marshal(wire.Error{Code: wire.CodeBusy, Message: "checkpointd is busy (test); retry later", RetryAfterMillis: &hint})
			reply := nats.NewMsg(m.Reply)
			reply.Header.Set(wire.HdrServiceErrorCode, wire.StatusCode(wire.CodeBusy))
			reply.Data = body
			_ = m.RespondMsg(reply)
			return
		}
		body, _ := json.Marshal(wire.Version{Key: wire.Key{Namespace: "default", Session: "s", Agent: "main"}, Version: 7})
		_ = m.Respond(body)
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush()) // the subscription is on the server before the client asks
	c, err := checkpoint.Connect(ns.ClientURL(), nil)
	require.NoError(t, err)
	defer c.Close()

	start := time.Now()
	v, err := c.Get(context.Background(), checkpoint.Key{Session: "s"}, 0)
	require.NoError(t, err, "busy three times, then served")
	require.Equal(t, uint64(7), v.Version)
	require.Equal(t, int64(4), asked.Load())
	require.GreaterOrEqual(t, time.Since(start), 3*10*time.Millisecond, "each retry waits at least half the hint")

	asked.Store(0)
	busyFor.Store(1 << 40)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = c.Get(ctx, checkpoint.Key{Session: "s"}, 0)
	require.ErrorIs(t, err, checkpoint.ErrBusy)
	require.NotErrorIs(t, err, checkpoint.ErrUnavailable)
	require.ErrorContains(t, err, "gave up after")
	var ce *checkpoint.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 20*time.Millisecond, ce.RetryAfter)
	require.Greater(t, asked.Load(), int64(2), "it kept trying until the deadline was near")
	require.Less(t, asked.Load(), int64(50), "with growing waits, not in a tight loop")
}
