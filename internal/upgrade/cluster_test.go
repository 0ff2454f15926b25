package upgrade

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// On a three-node cluster (R3 buckets and stream), a format-2 store is upgraded as on one server:
// versions, records and a lease copied, the buckets deleted, the marker done; stopped once in the
// middle, a second run finishes it.
func TestRun_Cluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := testenv.StartCluster(t, 3)
	nc := c.Conn()
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	// A loaded machine may still count a peer offline just after the cluster formed (10005, no
	// suitable peers for placement): the daemon retries that at start-up, and so does the test.
	var st *transfer.Store
	require.Eventually(t, func() bool {
		st, err = transfer.OpenStore(ctx, js, transfer.StoreConfig{Replicas: 3, ChunkSize: 64 << 10})
		return err == nil
	}, 30*time.Second, 200*time.Millisecond, "the format-2 buckets never opened on the cluster")
	var want []wire.Version
	for i := range 3 {
		key := wire.Key{Namespace: "team", Session: fmt.Sprint("s", i), Agent: "main"}
		for v := 1; v <= 3; v++ {
			conv := fmt.Sprintf(`[{"role":"user","content":[{"type":"text","text":"session %d turn %d"}]}]`, i, v)
			s, err := snapshot.Save(ctx, st, snapshot.SaveRequest{Key: key, SaveID: fmt.Sprint(i, v), Payload: []byte(conv), Now: time.Now()})
			require.NoError(t, err)
			want = append(want, s.Head.Version)
		}
	}
	leased := wire.Key{Namespace: "team", Session: "s1", Agent: "main"}
	lease, err := snapshotAcquire(ctx, st, leased)
	require.NoError(t, err)

	log, err := logstore.OpenLog(ctx, nc, logstore.LogConfig{Replicas: 3})
	require.NoError(t, err)
	opts := testOptions()
	opts.step = func(n int, _ string) error {
		if n == 5 {
			return errKilled
		}
		return nil
	}
	_, err = Run(ctx, js, engine.New(log, engine.Config{}), log, opts)
	require.ErrorIs(t, err, errKilled)
	eng := engine.New(log, engine.Config{})
	rep, err := Run(ctx, js, eng, log, testOptions())
	require.NoError(t, err)
	require.Equal(t, Buckets, rep.BucketsDeleted)

	for _, w := range want {
		got, err := eng.Version(ctx, keyOf(w.Key), w.Version)
		require.NoError(t, err)
		require.Equal(t, testenv.WithoutStorageFacts(w), testenv.WithoutStorageFacts(versionOf(got)))
	}
	ls, err := eng.LeaseStatus(ctx, keyOf(leased))
	require.NoError(t, err)
	require.Equal(t, *leaseOf(&lease), ls.Lease)
	need, err := Needed(ctx, js)
	require.NoError(t, err)
	require.False(t, need)
}
