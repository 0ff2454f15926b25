package logstore_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/engine/logtest"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// The tests on a cluster are in package logstore_test: internal/testenv imports internal/transfer,
// which imports this package since the daemon runs on the log engine.

// The JetStream log passes the conformance suite on a real R3 cluster, connected to a node that is
// not the stream's leader: direct gets are answered there, by a replica that learns of each write
// after it was acknowledged, so reads that must see every write (Last, and the end of Range and
// Sessions) go to the leader.
func TestLog_ConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := testenv.StartCluster(t, 3)
	cfg := logstore.LogConfig{Replicas: 3}
	logstore.OpenFresh(t, logstore.Connect(t, c.URLs()), cfg)
	leader := "nats://" + c.Node(c.StreamLeader(logstore.StreamOf(cfg), 10*time.Second)).Listen
	logtest.Run(t, freshOnEveryReplica(c, logstore.Connect(t, followerURL(c, logstore.StreamOf(cfg))), cfg),
		logstore.SuiteOptions(leader, cfg)) // the other log: a daemon on the leader's node
}

// freshOnEveryReplica is logstore.FreshLog on c: it also waits until every node has applied the
// stream's purge. A replica answers direct gets before it has (engine.Log lets what a purge
// removed be read for a moment on a replicated store), and a case would then read what the case
// before it wrote under the same key: under load, 2 to 4 fresh logs in 100 still served the
// entries of the one before (Range/BoundsAndOrder, after Get/OnlyItsOwnLog, both on n/a).
func freshOnEveryReplica(c *testenv.Cluster, nc *nats.Conn, cfg logstore.LogConfig) func(t *testing.T) engine.Log {
	fresh := logstore.FreshLog(nc, cfg)
	stream := logstore.StreamOf(cfg)
	return func(t *testing.T) engine.Log {
		t.Helper()
		l := fresh(t)
		require.Eventually(t, func() bool {
			for _, node := range c.Nodes {
				if n, ok := storedOn(node.Server, stream); !ok || n > 0 {
					return false
				}
			}
			return true
		}, 30*time.Second, 5*time.Millisecond, "every replica of %s applies its purge", stream)
		return l
	}
}

// storedOn returns how many messages s's replica of stream holds, as s itself has applied them;
// false if s has no replica of it (yet).
func storedOn(s *server.Server, stream string) (uint64, bool) {
	info, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	if err != nil {
		return 0, false
	}
	for _, acc := range info.AccountDetails {
		for _, sd := range acc.Streams {
			if sd.Name == stream {
				return sd.State.Msgs, true
			}
		}
	}
	return 0, false
}

// followerURL is the URL of a node that does not lead the stream.
func followerURL(c *testenv.Cluster, stream string) string {
	leader := c.StreamLeader(stream, 10*time.Second)
	for _, n := range c.Nodes {
		if n.Name != leader {
			return "nats://" + n.Listen
		}
	}
	panic("a cluster of one node")
}

// Two engines (daemons) on two nodes of an R3 cluster, one of them the stream's leader and the
// other not, share sessions: each one's cache goes stale when the other writes, and the
// compare-and-swap makes it read the head again; packs of either delete what they packed; a
// lease taken through one fences the other; every version reads back from both, cold.
func TestEngine_Cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := testenv.StartCluster(t, 3)
	lcfg := logstore.LogConfig{Replicas: 3}
	cfg := engine.Config{PackEntries: 6}
	logstore.OpenFresh(t, logstore.Connect(t, c.URLs()), lcfg)
	leader := c.StreamLeader(logstore.StreamOf(lcfg), 10*time.Second)
	leaderURL := "nats://" + c.Node(leader).Listen
	a, la := openEngine(t, logstore.Connect(t, leaderURL), lcfg, cfg)
	b, lb := openEngine(t, logstore.Connect(t, followerURL(c, logstore.StreamOf(lcfg))), lcfg, cfg)
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}

	enginetest.SaveTurns(t, a, k, 0, 20, 0)  // versions 1..10, packed by a
	enginetest.SaveTurns(t, b, k, 20, 40, 0) // b starts cold; a's cache is stale from here
	enginetest.SaveTurns(t, a, k, 40, 60, 0) // a's first save loses its compare-and-swap and reads the head again
	require.Less(t, enginetest.Entries(t, lb, k), 10, "packs deleted what they packed")
	for _, e := range []*engine.Engine{a, b} {
		e.Forget()
		enginetest.CheckVersions(t, e, k, 30)
	}

	// A lease taken through b fences a's writes without an epoch; the holder's epoch goes
	// through a as well.
	l, _, err := b.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "host-b", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	require.Equal(t, uint64(1), l.Lease.Epoch)
	_, err = a.Save(ctx, engine.SaveRequest{Key: k, SaveID: "a-no-lease", Base: enginetest.U64(30), Payload: enginetest.Array(60, 62), Now: now})
	require.ErrorIs(t, err, engine.ErrLeased)
	_, _, err = a.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "host-a", TTL: time.Minute, Now: now})
	require.ErrorIs(t, err, engine.ErrLeased)
	enginetest.SaveTurns(t, a, k, 60, 64, 1)
	_, err = b.Release(ctx, engine.LeaseRequest{Key: k, Epoch: 1, Now: now})
	require.NoError(t, err)
	_, _, err = a.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "host-a", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	_, err = b.Save(ctx, engine.SaveRequest{Key: k, SaveID: "b-old-epoch", Base: enginetest.U64(32), Payload: enginetest.Array(64, 66), Epoch: 1, Now: now})
	require.ErrorIs(t, err, engine.ErrFenced)
	enginetest.SaveTurns(t, b, k, 64, 70, 2)

	// A forced pack through one node, reads through both.
	_, err = a.Pack(ctx, k, true)
	require.NoError(t, err)
	for _, e := range []*engine.Engine{a, b} {
		e.Forget()
		enginetest.CheckVersions(t, e, k, 35)
	}
	require.Equal(t, enginetest.Entries(t, la, k), enginetest.Entries(t, lb, k))
	page, _, err := b.HistoryPage(ctx, k, engine.HistoryCursor{}, 5)
	require.NoError(t, err)
	require.Equal(t, uint64(35), page[0].Version)

	// b, which has not seen it, creating a session a made: its append on an empty log loses on
	// the leader, and the head read then decides (a conflict); its next save goes through.
	k2 := engine.Key{Namespace: "n", Session: "s2", Agent: "a"}
	enginetest.SaveTurns(t, a, k2, 0, 4, 0)
	_, err = b.Save(ctx, engine.SaveRequest{Key: k2, SaveID: "b-create", Expected: enginetest.U64(0), Payload: enginetest.Conversation(2), Now: now})
	var conflict *engine.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, uint64(2), conflict.Head)
	enginetest.SaveTurns(t, b, k2, 4, 6, 0)
	enginetest.CheckVersions(t, a, k2, 3)
}
