package logstore_test

import (
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/internal/engine/logtest"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
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
	leader := c.StreamLeader(logstore.StreamOf(cfg), 10*time.Second)
	var follower string
	for _, n := range c.Nodes {
		if n.Name != leader {
			follower = "nats://" + n.Listen
			break
		}
	}
	logtest.Run(t, logstore.FreshLog(logstore.Connect(t, follower), cfg))
}

// The engine runs on a JetStream cluster (R3, nats-server of go.mod), with head reads from the
// stream leader.
func TestStore_Cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := testenv.StartCluster(t, 3)
	nc := logstore.Connect(t, c.URLs())
	st := logstore.OpenForTest(t, nc, logstore.Config{Replicas: 3, LeaderReads: true})
	k := wire.Key{Namespace: "n", Session: "s", Agent: "a"}
	logstore.SaveTurns(t, st, k, 0, 40)
	st.Forget()
	logstore.CheckVersions(t, st, k, 20)
}
