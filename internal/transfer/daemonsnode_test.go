package transfer_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The save of TestCluster_Harness that CI saw unsettled after 30 s: both daemons were connected to
// the node that led the meta group, which was killed; a save sent right after found no daemon
// subscribed (they were moving to another node) and went to the ingest stream. The daemon that
// took it had never stored a result (the other one had made CP_RESULTS), so it opened CP_RESULTS
// first (to look for the save id's earlier outcome), holding the lock every other save off the
// stream waits for, with a request bounded only by the save's 30 s: an update of the stream,
// which only the meta leader answers, sent because the server's defaults looked like changed
// settings. Here the node leading the meta group and CP_RESULTS dies, so that even the stream
// lookup goes unanswered until the elections: the save must settle seconds after them.
func TestCluster_IngestSaveSettlesAfterMetaAndResultsLeaderDie(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl := testenv.StartCrashCluster(t, 3)
	victim := cl.MetaLeader(10 * time.Second)
	require.NotEmpty(t, victim)
	var tweak []func(*transfer.Config) // CHECKPOINTD_TEST_LOG=1 shows the daemons' logs
	if os.Getenv("CHECKPOINTD_TEST_LOG") != "" {
		tweak = append(tweak, func(c *transfer.Config) { c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil)) })
	}
	cl.StartDaemonOn(victim, tweak...)
	cl.StartDaemonOn(victim, tweak...)
	// CP_RESULTS made after the daemons opened their streams, by another daemon storing the
	// first result: neither of these has opened it.
	other := otherNode(cl, victim)
	admin := cl.ConnTo(other)
	defer admin.Close()
	js, err := jetstream.New(admin)
	require.NoError(t, err)
	ctx := ctxT(t)
	st, err := edge.EnsureStreams(ctx, js, 3, transfer.DefaultConfig().ResultTTL)
	require.NoError(t, err)
	_, err = st.Results(ctx, true)
	require.NoError(t, err)
	cl.WaitForReplicas()
	// The victim leads the meta group and CP_RESULTS, and nothing else.
	moveLeader(t, cl, wire.StreamResults, "", func(n string) bool { return n == victim })
	for _, s := range []string{wire.StreamIngest, wire.StreamChunks, edge.LogStream} {
		moveLeader(t, cl, s, "", func(n string) bool { return n != victim })
	}
	moveLeader(t, cl, wire.StreamIngest, edge.IngestConsumer, func(n string) bool { return n != victim })
	require.Equal(t, victim, cl.MetaLeader(time.Second), "the meta leader moved")

	c := cl.ClientOn(other, checkpoint.WithIngestSaves())
	key := checkpoint.Key{Session: "after-the-kill"}
	killed := time.Now()
	cl.Kill(victim)
	elected := make(chan time.Duration, 1) // for the log: how long the elections took
	go func() {
		cl.MetaLeader(time.Minute)
		cl.StreamLeader(wire.StreamResults, time.Minute)
		elected <- time.Since(killed)
	}()
	sctx, cancel := context.WithTimeout(context.Background(), 25*time.Second) // elections take 4-9 s
	defer cancel()
	v, err := c.Save(sctx, key, turn(nil, "agent", 0))
	require.NoError(t, err, "a save off the ingest stream %s after the node leading the meta group and CP_RESULTS died", time.Since(killed).Round(time.Millisecond))
	require.Equal(t, uint64(1), v.Version)
	settled := time.Since(killed)
	t.Logf("settled %s after the kill, the leaders elected after %s", settled.Round(time.Millisecond), (<-elected).Round(time.Millisecond))
}

// otherNode names a live node of cl other than not.
func otherNode(cl *testenv.Cluster, not string) string {
	for _, n := range cl.LiveNodes() {
		if n != not {
			return n
		}
	}
	return ""
}

// moveLeader steps the leader of stream (of its consumer, if consumer is not "") down until a node
// that suits leads it.
func moveLeader(t *testing.T, cl *testenv.Cluster, stream, consumer string, suits func(string) bool) {
	t.Helper()
	leader := func() string {
		if consumer != "" {
			return cl.ConsumerLeader(stream, consumer, 10*time.Second)
		}
		return cl.StreamLeader(stream, 10*time.Second)
	}
	for try := 0; !suits(leader()); try++ {
		require.Less(t, try, 20, "the leader of %s %s does not move where it should", stream, consumer)
		cl.StepDown(stream, consumer, 5*time.Second)
	}
}
