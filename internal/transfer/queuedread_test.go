package transfer_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A read of a session's head waits for the saves queued for it on CP_INGEST before the read: get,
// restore (read) and history, oldest and newest first, each see a save that is still queued when
// they ask (the ingester is held back by a full ingest budget, then let go). The daemon asks the
// queue beside the engine's read (service/queuepeek.go); finding a save queued, it reads again once
// the save is settled.
func TestRead_WaitsForTheSaveQueuedBeforeIt(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "queued before the read"}
	conv := turn(nil, "w", 1)
	_, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	nc := env.Conn()

	reads := []struct {
		name string
		head func() uint64
	}{
		{"get", func() uint64 {
			v, err := env.Client.Get(ctx, key, 0)
			require.NoError(t, err)
			return v.Version
		}},
		{"read", func() uint64 {
			got, v, err := env.Client.Restore(ctx, key, 0)
			require.NoError(t, err)
			require.Equal(t, string(conv), string(got), "the conversation of the version named")
			return v.Version
		}},
		{"history", func() uint64 {
			h, err := env.Client.History(ctx, key)
			require.NoError(t, err)
			return h[len(h)-1].Version
		}},
		{"history newest first", func() uint64 {
			body, _ := json.Marshal(wire.HistoryRequest{SessionRequest: wire.SessionRequest{Session: key.Session}, NewestFirst: true, Limit: 1})
			m, err := nc.Request(wire.APISubject(wire.DefaultNamespace, wire.OpHistory), body, 10*time.Second)
			require.NoError(t, err)
			var r wire.HistoryReply
			require.NoError(t, json.Unmarshal(m.Data, &r), "%s", m.Data)
			require.NotEmpty(t, r.Versions)
			return r.Versions[0].Version
		}},
	}
	for i, read := range reads {
		t.Run(read.name, func(t *testing.T) {
			release := transfer.HoldIngestBudget(env.Daemon, 10*time.Second) // the queued save waits for memory
			id := fmt.Sprintf("queued-%d", i)
			conv = turn(conv, "w", i+2)
			m := nats.NewMsg(wire.IngestSubject(key.WithDefaults()))
			m.Header.Set(wire.HdrSaveID, id)
			m.Data = conv
			_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
			require.NoError(t, err)
			go func() { time.Sleep(300 * time.Millisecond); release() }()
			require.Equal(t, uint64(i+2), read.head(), "the save queued before the read is seen")
		})
	}
}

// A restore of a head whose body the daemon has cached, of a session its engine holds (it saved
// it), is served with the ingest queue's question and the log's alone (docs/format.md §8.6: the
// engine's cached head, Log.Moved); a save queued before it is still seen: the restore waits for
// it and returns it, not the cached head.
func TestRestore_CachedHeadWaitsForTheSaveQueuedBeforeIt(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "cached, then queued"}
	conv := turn(nil, "w", 1)
	_, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	for range 2 { // the first restore caches the body, the second is served from the cache
		got, v, err := env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
		require.Equal(t, string(conv), string(got))
		require.Equal(t, uint64(1), v.Version)
	}
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	release := transfer.HoldIngestBudget(env.Daemon, 10*time.Second) // the queued save waits for memory
	conv = turn(conv, "w", 2)
	m := nats.NewMsg(wire.IngestSubject(key.WithDefaults()))
	m.Header.Set(wire.HdrSaveID, "queued")
	m.Data = conv
	_, err = js.PublishMsg(ctx, m, jetstream.WithMsgID("queued"))
	require.NoError(t, err)
	go func() { time.Sleep(300 * time.Millisecond); release() }()
	got, v, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(2), v.Version, "the save queued before the restore is seen")
	require.Equal(t, string(conv), string(got))
}
