package transfer_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// acked is one save a writer was told is durable.
type acked struct {
	key     checkpoint.Key
	version uint64
	hash    string
	conv    []byte
}

// saveUntilDone saves with one save id until it succeeds: an unavailable cluster (a leader being
// elected) is waited out, and the id makes a save that did land but whose reply was lost count once.
func saveUntilDone(ctx context.Context, c *checkpoint.Client, key checkpoint.Key, conv []byte) (checkpoint.Version, error) {
	id := nuid.Next()
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second) // far beyond any election
	defer cancel()
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := c.Save(sctx, key, conv, checkpoint.WithSaveID(id))
		cancel()
		if err == nil || ctx.Err() != nil {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// A 3-node JetStream cluster, two daemons, agents saving continuously; the node leading the ingest
// stream is killed. Saves resume, every acknowledged checkpoint is restorable, and versions stay
// gapless and unique under concurrent writers served by both daemons.
func TestCluster_LeaderLossLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl, acks, recovery := leaderLoss(t)
	t.Logf("first successful save %s after the leader was lost; %d saves acknowledged in all", recovery.Round(time.Millisecond), len(acks))
	ctx := ctxT(t)

	// Every acknowledged checkpoint is restorable, exactly.
	c := cl.Client()
	for _, a := range acks {
		if a.key == shared {
			continue // rewritten by the other writer; checked by hash below
		}
		got, v, err := c.Restore(ctx, a.key, a.version)
		require.NoError(t, err, "%s version %d", a.key, a.version)
		require.Equal(t, a.hash, v.Hash)
		require.Equal(t, string(a.conv), string(got))
	}
	// Concurrent writers: versions 1..N, each acknowledged save its own version.
	hist, err := c.History(ctx, shared)
	require.NoError(t, err)
	byVersion := map[uint64]string{}
	for i, v := range hist {
		require.Equal(t, uint64(i+1), v.Version, "no skipped or out-of-order version")
		byVersion[v.Version] = v.Hash
	}
	seen := map[uint64]bool{}
	for _, a := range acks {
		if a.key != shared {
			continue
		}
		require.False(t, seen[a.version], "version %d acknowledged to two saves", a.version)
		seen[a.version] = true
		require.Equal(t, a.hash, byVersion[a.version])
	}
}

// shared is the session two writers save to concurrently, through either daemon.
var shared = checkpoint.Key{Session: "shared"}

// leaderLoss runs a 3-node cluster with two daemons, four agents with a session each and two
// writers sharing one, kills the node leading CP_INGEST after a second, and keeps saving for two
// more. It returns every save acknowledged and how long after the kill the first save that started
// after it succeeded.
func leaderLoss(t testing.TB) (*testenv.Cluster, []acked, time.Duration) {
	cl := testenv.StartCluster(t, 3)
	var tweak []func(*transfer.Config) // CHECKPOINTD_TEST_LOG=1 shows the daemons' logs

	if os.Getenv("CHECKPOINTD_TEST_LOG") != "" {
		tweak = append(tweak, func(c *transfer.Config) { c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil)) })
	}
	d1 := cl.StartDaemon(tweak...)
	cl.StartDaemon(tweak...)
	require.Equal(t, 3, d1.Replicas(), "R3 by default in a cluster")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := cl.Conn()
	defer admin.Close()
	js, err := jetstream.New(admin)
	require.NoError(t, err)
	for _, name := range []string{wire.StreamIngest, edge.LogStream} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		require.Equal(t, 3, s.CachedInfo().Config.Replicas, name)
	}

	var (
		mu        sync.Mutex
		acks      []acked
		stop      atomic.Bool
		firstSave atomic.Int64 // unix nanos of the first save to succeed after the kill
		killedAt  atomic.Int64
		failures  atomic.Int32
		wg        sync.WaitGroup
	)
	record := func(key checkpoint.Key, v checkpoint.Version, conv []byte, started time.Time) {
		mu.Lock()
		acks = append(acks, acked{key, v.Version, v.Hash, conv})
		mu.Unlock()
		if k := killedAt.Load(); k != 0 && started.UnixNano() > k {
			firstSave.CompareAndSwap(0, time.Now().UnixNano())
		}
	}
	// Four agents with a session each, and two writers sharing one session.
	for a := 0; a < 4; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cl.Client(checkpoint.WithTimeout(5 * time.Second))
			key := checkpoint.Key{Session: fmt.Sprintf("agent-%d", a)}
			conv := []byte("[]")
			for n := 0; !stop.Load(); n++ {
				next := turn(conv, key.Session, n)
				started := time.Now()
				v, err := saveUntilDone(ctx, c, key, next)
				if err != nil {
					failures.Add(1)
					t.Errorf("%s: a save never succeeded: %v", key.Session, err)
					return
				}
				conv = next
				record(key, v, conv, started)
				time.Sleep(5 * time.Millisecond) // an agent's turn takes a while
			}
		}()
	}
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cl.Client(checkpoint.WithTimeout(5 * time.Second))
			for n := 0; !stop.Load(); n++ {
				conv := turn(nil, fmt.Sprintf("writer-%d", w), n)
				started := time.Now()
				v, err := saveUntilDone(ctx, c, shared, conv)
				if err != nil {
					failures.Add(1)
					t.Errorf("shared: a save never succeeded: %v", err)
					return
				}
				record(shared, v, conv, started)
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}

	time.Sleep(time.Second)
	s, err := js.Stream(ctx, wire.StreamIngest)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	leader := info.Cluster.Leader
	require.NotEmpty(t, leader)
	mu.Lock()
	before := len(acks)
	mu.Unlock()
	killedAt.Store(time.Now().UnixNano())
	cl.Kill(leader)
	t.Logf("killed %s, the leader of %s, after %d acknowledged saves", leader, wire.StreamIngest, before)

	require.Eventually(t, func() bool { return firstSave.Load() != 0 }, 60*time.Second, 10*time.Millisecond, "no save succeeded after the leader was lost")
	recovery := time.Duration(firstSave.Load() - killedAt.Load())
	time.Sleep(2 * time.Second) // keep saving on the new leader
	stop.Store(true)
	wg.Wait()
	require.Greater(t, len(acks), before, "saves resumed")
	return cl, acks, recovery
}

// Two checkpointd instances serve one cluster; writers hammer one session through both. Every
// acknowledged save has its own version, the versions are 1..N with none skipped, and the
// conversation of each is the one that was acknowledged.
func TestCluster_TwoDaemonsConcurrentWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl := testenv.StartCluster(t, 3)
	cl.StartDaemon()
	cl.StartDaemon()
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "contended"}
	var (
		mu   sync.Mutex
		acks = map[uint64]string{} // version → hash
		wg   sync.WaitGroup
	)
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cl.Client()
			for i := 0; i < 25; i++ {
				conv := turn(nil, fmt.Sprintf("writer-%d", w), i)
				v, err := c.Save(ctx, key, conv)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				_, dup := acks[v.Version]
				acks[v.Version] = wire.Hash(conv)
				mu.Unlock()
				assert.False(t, dup, "version %d acknowledged twice", v.Version)
			}
		}()
	}
	wg.Wait()
	hist, err := cl.Client().History(ctx, key)
	require.NoError(t, err)
	require.Len(t, hist, 150)
	for i, v := range hist {
		require.Equal(t, uint64(i+1), v.Version)
		require.Equal(t, acks[v.Version], v.Hash, "version %d holds what was acknowledged for it", v.Version)
	}
}
