package upgrade

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/snapshot/kvstore"
	"github.com/checkpointd/checkpointd/internal/testenv"
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
	var st *kvstore.Store
	require.Eventually(t, func() bool {
		st, err = kvstore.OpenStore(ctx, js, kvstore.StoreConfig{Replicas: 3, ChunkSize: 64 << 10})
		return err == nil
	}, 30*time.Second, 200*time.Millisecond, "the format-2 buckets never opened on the cluster")
	var want []snapshot.Version
	for i := range 3 {
		key := snapshot.Key{Namespace: "team", Session: fmt.Sprint("s", i), Agent: "main"}
		for v := 1; v <= 3; v++ {
			conv := fmt.Sprintf(`[{"role":"user","content":[{"type":"text","text":"session %d turn %d"}]}]`, i, v)
			s, err := snapshot.Save(ctx, st, snapshot.SaveRequest{Key: key, SaveID: fmt.Sprint(i, v), Payload: []byte(conv), Now: time.Now()})
			require.NoError(t, err)
			want = append(want, s.Head.Version)
		}
	}
	leased := snapshot.Key{Namespace: "team", Session: "s1", Agent: "main"}
	lease, err := snapshotAcquire(ctx, st, leased)
	require.NoError(t, err)

	// Under load the cluster may be electing its meta leader again when CP_LOG is made (10008,
	// "JetStream system temporarily unavailable"): the daemon's start-up retries that
	// (transfer.OpenEngine), and so does the test.
	log, err := logstore.OpenLog(ctx, nc, logstore.LogConfig{Replicas: 3})
	for attempt := 1; err != nil && Transient(err) && attempt < 120; attempt++ { // up to 30 s, as long as an election under load took
		time.Sleep(250 * time.Millisecond)
		log, err = logstore.OpenLog(ctx, nc, logstore.LogConfig{Replicas: 3})
	}
	require.NoError(t, err)
	opts := testOptions()
	opts.step = func(n int, _ string) error {
		if n == 5 {
			return errKilled
		}
		return nil
	}
	_, err = Run(ctx, js, engine.New(log, engine.Config{}), log, opts)
	for attempt := 1; err != nil && Transient(err) && attempt < 20; attempt++ {
		time.Sleep(250 * time.Millisecond)
		_, err = Run(ctx, js, engine.New(log, engine.Config{}), log, opts)
	}
	require.ErrorIs(t, err, errKilled)
	eng := engine.New(log, engine.Config{})
	// Right after the streams were made, a replica may not answer direct gets yet (no responders):
	// the daemon runs the upgrade again on such errors, as here (it goes on where it stopped).
	rep, err := Run(ctx, js, eng, log, testOptions())
	for attempt := 1; err != nil && Transient(err) && attempt < 20; attempt++ {
		time.Sleep(250 * time.Millisecond)
		rep, err = Run(ctx, js, eng, log, testOptions())
	}
	require.NoError(t, err)
	require.Equal(t, Buckets, rep.BucketsDeleted)

	for _, w := range want {
		got, err := eng.Version(ctx, keyOf(w.Key), w.Version)
		require.NoError(t, err)
		require.Equal(t, testenv.WithoutStorageFacts(asProtocols(t, w)), testenv.WithoutStorageFacts(versionOf(got)))
	}
	ls, err := eng.LeaseStatus(ctx, keyOf(leased))
	require.NoError(t, err)
	require.Equal(t, *leaseOf(&lease), ls.Lease)
	need, err := Needed(ctx, js)
	require.NoError(t, err)
	require.False(t, need)

	t.Run("marker writes refused while another write is in process", func(t *testing.T) {
		markerWritesWhileInProcess(ctx, t, js)
	})
}

// markerWritesWhileInProcess writes the marker again and again, as a run's heartbeats do, while
// writes to another subject that check the marker's last sequence (the header
// Nats-Expected-Last-Subject-Sequence-Subject) keep the marker's subject "in process" on R3's
// leader: the leader refuses marker writes then with 10164, and the marker's last sequence has
// not moved, so each is retried, never taken for another daemon's takeover (ErrInProgress).
func markerWritesWhileInProcess(ctx context.Context, t *testing.T, js jetstream.JetStream) {
	u := &upgrader{js: js, opts: testOptions().withDefaults(), runID: "in-a-row"}
	var err error
	u.stream, err = js.Stream(ctx, "CP_LOG")
	require.NoError(t, err)
	_, u.markSeq, err = readMarker(ctx, u.stream)
	require.NoError(t, err)
	var last atomic.Uint64
	last.Store(u.markSeq)
	// The noise is published with at most a few writes unacknowledged: enough to keep the marker's
	// subject in process, and it waits for acks rather than spinning. Unbounded (nats.go's 4,000
	// pending, its errors ignored), it spun on the CPU the marker writes need, and under load
	// (-race, two test packages at once) 300 marker writes outlasted the test's minute.
	noise, err := jetstream.New(js.Conn(), jetstream.WithPublishAsyncMaxPending(16))
	require.NoError(t, err)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			m := nats.NewMsg(MarkerSubject + ".noise")
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last.Load(), 10))
			m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", MarkerSubject)
			_, _ = noise.PublishMsgAsync(m)
		}
	}()
	defer func() { close(stop); <-stopped }()
	for i := range 300 {
		require.NoError(t, u.writeMarker(ctx, stateDone), "marker write %d", i)
		last.Store(u.markSeq)
	}
}
