package transfer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// takeIngestConsumer deletes the daemon's ingest consumer and puts in its place one of the same
// name that the daemon cannot take over (a push consumer cannot be updated to pull), so that the
// daemon's attempts to recreate its own fail until the impostor is gone.
func takeIngestConsumer(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	require.Eventually(t, func() bool {
		if err := js.DeleteConsumer(ctx, wire.StreamIngest, "checkpointd"); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Logf("delete: %v", err)
			return false
		}
		_, err := js.CreateConsumer(ctx, wire.StreamIngest, jetstream.ConsumerConfig{Durable: "checkpointd",
			AckPolicy: jetstream.AckExplicitPolicy, DeliverSubject: "impostor.nobody.listens", FilterSubject: "cp.ingest.>"})
		if err != nil {
			t.Logf("create: %v", err)
		}
		return err == nil // else the daemon was quicker: delete its new one again
	}, 10*time.Second, 10*time.Millisecond)
}

// An operator deletes the ingest consumer: the daemon says it is unhealthy, and why, for as long as
// it cannot consume (and, with saves queued and none settled, that ingest stalled); it recreates
// its consumer as soon as it can, and the saves queued meanwhile are settled.
func TestDaemon_HealthFollowsTheIngestConsumer(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) {
		c.HealthInterval = 100 * time.Millisecond
		c.StallAfter = time.Second
	})
	ctx := ctxT(t)
	_, err := env.Client.Save(ctx, checkpoint.Key{Session: "before"}, []byte(`[]`))
	require.NoError(t, err)
	require.NoError(t, env.Daemon.Health())
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)

	takeIngestConsumer(t, ctx, js)
	require.Eventually(t, func() bool { return !env.Daemon.Ready() }, 5*time.Second, 10*time.Millisecond,
		"health must fail while no ingest consumer of the daemon's exists")
	require.ErrorContains(t, env.Daemon.Health(), "ingest consumer checkpointd")

	// A save queued meanwhile (on the ingest stream, where a client's save goes when no daemon
	// answers its request) waits; once it has waited longer than StallAfter, health says so.
	saved := make(chan error, 1)
	go func() {
		saved <- queueSave(ctx, env, checkpoint.Key{Session: "during"}, []byte(`[{"role":"user","content":[{"type":"text","text":"hi"}]}]`))
	}()
	require.Eventually(t, func() bool {
		err := env.Daemon.Health()
		return err != nil && errorContains(err, "ingest stalled")
	}, 10*time.Second, 50*time.Millisecond)
	t.Logf("health: %v", env.Daemon.Health())

	require.NoError(t, js.DeleteConsumer(ctx, wire.StreamIngest, "checkpointd"))
	require.Eventually(t, func() bool { return env.Daemon.Health() == nil }, 10*time.Second, 20*time.Millisecond,
		"the daemon recreates its consumer")
	select {
	case err := <-saved:
		require.NoError(t, err, "the save queued while the consumer was gone is settled")
	case <-time.After(20 * time.Second):
		t.Fatal("the queued save was never settled")
	}
	v, err := env.Client.Save(ctx, checkpoint.Key{Session: "after"}, []byte(`[]`))
	require.NoError(t, err)
	require.Equal(t, uint64(1), v.Version)
	info, err := js.Consumer(ctx, wire.StreamIngest, "checkpointd")
	require.NoError(t, err)
	require.Empty(t, info.CachedInfo().Config.DeliverSubject, "the daemon's own consumer is back")

	// Deleted and nothing in its way: saving goes on (it stopped until a restart before).
	require.NoError(t, js.DeleteConsumer(ctx, wire.StreamIngest, "checkpointd"))
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	require.NoError(t, queueSave(sctx, env, checkpoint.Key{Session: "after"}, []byte(`[{"role":"user","content":[{"type":"text","text":"again"}]}]`)))
	require.Eventually(t, func() bool { return env.Daemon.Health() == nil }, 5*time.Second, 20*time.Millisecond)
}

func errorContains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// The embedded server logs nothing of the daemon's connection; the daemon does, and counts it.
func TestDaemon_CountsItsConnectionsEvents(t *testing.T) {
	env := testenv.Start(t)
	require.Zero(t, natsEvents(t, env.Registry, "disconnect"))
	cz, err := env.Server.Connz(nil)
	require.NoError(t, err)
	kicked := false
	for _, c := range cz.Conns {
		if c.Name == "checkpointd-test" { // the daemon's connection (testenv names it)
			require.NoError(t, env.Server.DisconnectClientByID(c.Cid))
			kicked = true
		}
	}
	require.True(t, kicked)
	require.Eventually(t, func() bool {
		return natsEvents(t, env.Registry, "disconnect") == 1 && natsEvents(t, env.Registry, "reconnect") == 1
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return env.Daemon.Health() == nil }, 10*time.Second, 20*time.Millisecond)
	_, err = env.Client.Save(ctxT(t), checkpoint.Key{Session: "after-reconnect"}, []byte(`[]`))
	require.NoError(t, err)
}

// queueSave publishes a save on the ingest stream, as a client does when no daemon answers its
// request, and waits for its result: nil if it made a version.
func queueSave(ctx context.Context, env *testenv.Env, key checkpoint.Key, conv []byte) error {
	nc, err := nats.Connect(env.URL())
	if err != nil {
		return err
	}
	defer nc.Close()
	key = key.WithDefaults()
	saveID := nuid.Next()
	sub, err := nc.SubscribeSync(wire.ResultSubject(key.Namespace, saveID))
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	m := nats.NewMsg(wire.IngestSubject(key))
	m.Header.Set(wire.HdrSaveID, saveID)
	m.Data = conv
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return err
	}
	r, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return err
	}
	var res wire.SaveResult
	if err := json.Unmarshal(r.Data, &res); err != nil {
		return err
	}
	if !res.OK {
		return fmt.Errorf("refused: %+v", res.Error)
	}
	return nil
}
