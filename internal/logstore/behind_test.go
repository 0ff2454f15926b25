package logstore_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A listing never shows a session a Purge or a Delete removed before it, although the replicas
// that answer its direct gets have not applied the removal (their apply held back:
// Cluster.PauseApply) and still hold the session. A Purge is no message: the stream's last
// sequence, which Lasts checks a replica's answer against, did not move, so a replica's head of
// the purged log passed for current, and the engine listed the session (docs/format.md §8.6,
// Listing sessions). The server sends each direct get to any replica, the leader included, so the
// reads are made several times: with both followers held back, 2 in 3 go to one of them.
func TestCluster_ListingAfterPurgeOnAReplicaBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c, lcfg, stream, leader, followers := freshCluster(t)
	writer, wlog := openEngine(t, logstore.Connect(t, "nats://"+c.Node(leader).Listen), lcfg, engine.Config{})
	readerConn := logstore.Connect(t, "nats://"+c.Node(followers[0]).Listen)
	reader, rlog := openEngine(t, readerConn, lcfg, engine.Config{})

	purged, deleted, kept := keyOfN("purged"), keyOfN("deleted"), keyOfN("kept")
	for _, k := range []engine.Key{purged, deleted, kept} {
		enginetest.SaveTurns(t, writer, k, 0, 2, 0)
	}
	head, err := wlog.Last(ctx, kept)
	require.NoError(t, err)
	for _, f := range followers {
		c.WaitForDirectGets(f, stream)
		c.PauseApply(f, stream) // once it has the three sessions
	}

	require.NoError(t, wlog.Purge(ctx, purged)) // as the upgrade purges a session
	stale := 0
	for range 20 {
		if replicaHead(t, readerConn, stream, purged) != 0 {
			stale++
		}
		heads, err := rlog.Lasts(ctx, []engine.Key{purged, kept})
		require.NoError(t, err)
		require.Zero(t, heads[0].Seq, "Lasts after a Purge: the purged log is empty")
		require.Equal(t, head.Seq, heads[1].Seq)
		require.Equal(t, []engine.Key{deleted, kept}, listed(t, reader), "a listing after a Purge")
	}
	require.NotZero(t, stale, "none of 20 direct gets was answered by a replica that still holds the purged log")

	_, err = writer.Delete(ctx, deleted, nil) // a tombstone: an append, which the replicas lack
	require.NoError(t, err)
	for range 5 {
		require.Equal(t, []engine.Key{kept}, listed(t, reader), "a listing after a Delete")
	}
}

func keyOfN(session string) engine.Key {
	return engine.Key{Namespace: "n", Session: session, Agent: "a"}
}

// listed is the keys engine.Sessions lists in namespace n.
func listed(t *testing.T, e *engine.Engine) []engine.Key {
	t.Helper()
	heads, next, err := e.Sessions(ctx, "n", 0, 100)
	require.NoError(t, err)
	require.Zero(t, next)
	keys := []engine.Key{}
	for _, h := range heads {
		keys = append(keys, h.Key)
	}
	return keys
}

// replicaHead is the sequence of k's last entry on the replica that answers direct gets sent
// through nc (the replica on nc's node: a server answers from its own replica first), 0 if none.
func replicaHead(t *testing.T, nc *nats.Conn, stream string, k engine.Key) uint64 {
	t.Helper()
	wk := wire.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
	body, err := json.Marshal(map[string]string{"last_by_subj": "cp.log." + wk.Token()})
	require.NoError(t, err)
	reply, err := nc.Request("$JS.API.DIRECT.GET."+stream, body, 5*time.Second)
	require.NoError(t, err)
	if reply.Header.Get("Status") == "404" {
		return 0
	}
	seq, err := strconv.ParseUint(reply.Header.Get("Nats-Sequence"), 10, 64)
	require.NoError(t, err, "direct get reply %v", reply.Header)
	return seq
}

// A restore of the head whose body the daemon has cached (ReadZstdIf, found says no) returns the
// version another daemon saved after it, on a single server and on a cluster whose replicas that
// answer direct gets have not applied it (their apply held back): the engine trusts the head it
// saved only while Log.Moved finds no entry after it, and Moved asks the replica Last asks (the
// stream's leader on a cluster), never one that may lag. The reads are made several times: the
// server sends each direct get to any replica, 2 in 3 to a held-back one.
func TestEngine_HeadReadAfterAnotherDaemonSaved(t *testing.T) {
	t.Run("single server", func(t *testing.T) {
		s, err := logstore.StartEmbedded(t.TempDir())
		require.NoError(t, err)
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		reader, _ := openEngine(t, logstore.Connect(t, s.ClientURL()), logstore.LogConfig{}, engine.Config{})
		writer, _ := openEngine(t, logstore.Connect(t, s.ClientURL()), logstore.LogConfig{}, engine.Config{})
		checkHeadAfterAnotherSaved(t, reader, writer, func() {})
	})
	t.Run("cluster, replicas behind", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a 3-node cluster")
		}
		c, lcfg, stream, leader, followers := freshCluster(t)
		writer, _ := openEngine(t, logstore.Connect(t, "nats://"+c.Node(leader).Listen), lcfg, engine.Config{})
		reader, _ := openEngine(t, logstore.Connect(t, "nats://"+c.Node(followers[0]).Listen), lcfg, engine.Config{})
		checkHeadAfterAnotherSaved(t, reader, writer, func() {
			for _, f := range followers {
				c.WaitForDirectGets(f, stream)
				c.PauseApply(f, stream) // once it has the reader's version
			}
		})
	})
}

// checkHeadAfterAnotherSaved: reader saves version 1 and reads its head from its cache; hold runs;
// writer saves version 2; reader's head reads are version 2.
func checkHeadAfterAnotherSaved(t *testing.T, reader, writer *engine.Engine, hold func()) {
	k := keyOfN("s")
	head := func() engine.Record {
		t.Helper()
		_, rec, err := reader.ReadZstdIf(ctx, k, 0, func(engine.Record) (bool, error) { return false, nil })
		require.NoError(t, err)
		return rec
	}
	enginetest.SaveTurns(t, reader, k, 0, 2, 0)
	require.Equal(t, uint64(1), head().Version)
	hold()
	enginetest.SaveTurns(t, writer, k, 2, 4, 0)
	want, err := writer.Head(ctx, k)
	require.NoError(t, err)
	for range 10 {
		require.Equal(t, want, head(), "the head after another daemon saved version 2")
	}
}

// freshCluster starts a 3-node cluster with a fresh replicated log and returns it with the log's
// config, its stream, the stream's leader and the two followers.
func freshCluster(t *testing.T) (*testenv.Cluster, logstore.LogConfig, string, string, []string) {
	c := testenv.StartCluster(t, 3)
	lcfg := logstore.LogConfig{Replicas: 3}
	stream := logstore.StreamOf(lcfg)
	logstore.OpenFresh(t, logstore.Connect(t, c.URLs()), lcfg)
	leader := c.StreamLeader(stream, 10*time.Second)
	var followers []string
	for _, n := range c.Nodes {
		if n.Name != leader {
			followers = append(followers, n.Name)
		}
	}
	return c, lcfg, stream, leader, followers
}
