package transfer_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Migrated away and straight back with nothing new: the session is writable at home again, and
// sealed at the other end.
func TestMigrate_BackWithNothingNew(t *testing.T) {
	a, b := testenv.Start(t), testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "roundtrip"}
	convs := growing(t, a.Client, key, "openhands_gui_todo_app.json", 6)
	_, err := a.Client.Migrate(ctx, b.Client, key, checkpoint.MigrateOptions{MovedTo: b.URL()})
	require.NoError(t, err)
	p, err := b.Client.Migrate(ctx, a.Client, key, checkpoint.MigrateOptions{MovedTo: a.URL()})
	require.NoError(t, err)
	require.Zero(t, p.Versions)
	_, err = a.Client.Save(ctx, key, turn(convs[len(convs)-1], "home", 1))
	require.NoError(t, err, "home again")
	_, err = b.Client.Save(ctx, key, []byte(`[]`))
	require.ErrorIs(t, err, checkpoint.ErrMoved)
}

// Saves a holder published (acknowledged by JetStream) before releasing are settled under its
// epoch, not fenced by the release.
func TestLease_ReleaseSettlesQueuedSaves(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "queued"}
	l, err := env.Client.Acquire(ctx, key, checkpoint.WithoutRenewal())
	require.NoError(t, err)
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	conv := []byte("[]")
	for i := 0; i < 30; i++ {
		conv = turn(conv, "holder", i)
		m := nats.NewMsg(wire.IngestSubject(key.WithDefaults()))
		m.Header.Set(wire.HdrEpoch, strconv.FormatUint(l.Epoch(), 10))
		m.Header.Set(wire.HdrSaveID, fmt.Sprint("q", i))
		m.Data = conv
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	require.NoError(t, l.Release(ctx))
	h, err := env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, h, 30, "every acknowledged save before the release is a version")
}

// Delete while the lease is being renewed: it retries instead of failing, and the epoch survives
// it, so the old holder stays fenced in the session that starts again.
func TestLease_DeleteUnderRenewalsKeepsTheEpoch(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "deleted"}
	old, err := env.Client.Acquire(ctx, key, checkpoint.WithTTL(time.Hour), checkpoint.WithoutRenewal())
	require.NoError(t, err)
	_, err = old.Save(ctx, turn(nil, "old", 1))
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = old.Renew(context.Background())
			}
		}
	}()
	_, err = env.Client.Delete(ctx, key, nil)
	close(stop)
	wg.Wait()
	require.NoError(t, err, "a renewal moving the head is not a failure")
	_, _, err = env.Client.Restore(ctx, key, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)

	fresh, err := env.Client.Acquire(ctx, key)
	require.NoError(t, err)
	require.Greater(t, fresh.Epoch(), old.Epoch(), "epochs only grow, across a delete")
	_, err = old.Save(ctx, turn(nil, "old", 2))
	require.ErrorIs(t, err, checkpoint.ErrFenced)
	require.NoError(t, fresh.Release(ctx))
}

// A refused save sent in chunks leaves no chunks behind.
func TestDaemon_RefusedChunkedSaveLeavesNoChunks(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "big refused"}
	_, err := env.Client.Save(ctx, key, turn(nil, "first", 1))
	require.NoError(t, err)
	big := make([]byte, 0, 600<<10)
	big = append(big, '[')
	for i := 0; len(big) < 500<<10; i++ {
		if i > 0 {
			big = append(big, ',')
		}
		big = append(big, fmt.Sprintf(`{"role":"user","content":"%d %x"}`, i, i*7919)...)
	}
	big = append(big, ']')
	_, err = env.Client.Save(ctx, key, big, checkpoint.ExpectVersion(7))
	require.ErrorIs(t, err, checkpoint.ErrConflict)
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	s, err := js.Stream(ctx, wire.StreamChunks)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, 5*time.Second, 20*time.Millisecond, "chunks of a refused save are removed")
}
