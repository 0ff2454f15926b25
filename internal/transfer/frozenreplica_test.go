package transfer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
)

// A read of a session's entries (a Range: batched direct gets, then the leader's last word) whose
// answering server hangs gives up after edge.OpTimeout without a reply message, not after the
// whole Range's bound (10 s): the engine then fails the save or read it was for, and the writer's
// retry reaches a server that lives. Seen in TestCluster_Harness as a save that took 10 s after a
// kill. Here CP_LOG has one replica, on a node other than the reader's, and that node is frozen
// (SIGSTOP: connections open, nothing answered).
func TestCluster_RangeFromAFrozenServerGivesUpSoon(t *testing.T) {
	cl := testenv.StartCrashCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func(node string) engine.Log {
		nc := cl.ConnTo(node)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		var log engine.Log
		require.Eventually(t, func() bool { // the cluster may still be settling its leaders
			l, _, err := edge.OpenLog(ctx, nc, js, 1)
			log = l
			return err == nil
		}, 30*time.Second, 200*time.Millisecond)
		return edge.BoundedLog{Log: log}
	}
	writer := open("n1") // creates CP_LOG, one replica
	key := engine.Key{Namespace: "default", Session: "frozen", Agent: "main"}
	var seq uint64
	for i := range 3 {
		var err error
		seq, err = writer.Append(ctx, key, []byte(fmt.Sprint("entry ", i)), seq)
		require.NoError(t, err)
	}
	// Where the entries are, asked once they are written: under load the meta leader can place a
	// new stream again when its first peer is slow to take it, so an answer from before may be
	// out of date.
	js, err := jetstream.New(cl.ConnTo("n1"))
	require.NoError(t, err)
	info, err := js.Stream(ctx, edge.LogStream)
	require.NoError(t, err)
	require.NotNil(t, info.CachedInfo().Cluster)
	holder := info.CachedInfo().Cluster.Leader
	require.NotEmpty(t, holder)
	reader := "n1"
	if holder == reader {
		reader = "n2"
	}
	log := open(reader)
	read := func() (int, error) {
		n := 0
		err := log.Range(ctx, key, 1, 0, func(engine.Entry) bool { n++; return true })
		return n, err
	}
	n, err := read()
	require.NoError(t, err)
	require.Equal(t, 3, n)

	thaw := cl.Freeze(holder)
	start := time.Now()
	_, err = read()
	took := time.Since(start)
	require.Error(t, err, "a read from a frozen server")
	require.True(t, edge.IsTransient(err), "an error the save or read is retried after: %v", err)
	require.Less(t, took, 3*edge.OpTimeout, "gave up after %s (the Range's whole bound is 10 s)", took)
	thaw()
	require.Eventually(t, func() bool { n, err := read(); return err == nil && n == 3 }, 30*time.Second, 100*time.Millisecond,
		"the entries are read again once the server answers")
}
