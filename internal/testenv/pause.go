package testenv

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// PauseApply holds back node's replica of stream: once it has applied everything the stream's
// leader had applied when called, it goes on storing what the leader sends it (and counting for
// the quorum) but applies none of it, as a replica that is behind does, until the returned resume
// is called (also when the test ends). Direct gets it answers are answered from what it had
// applied: a test shows with it what a reader sees from a replica that has not applied an
// acknowledged write yet. node must be a follower of stream in an embedded cluster (StartCluster).
//
// A server hands a direct get from a client to any replica of the queue group, its own or one
// across a route, at random: a test that wants the stale replica to answer pauses every follower
// and reads several times (the leader answers a third of them in an R3 cluster).
//
// nats-server keeps its Raft groups unexported (Server.raftNodes): the group is read by
// reflection, under the server's own lock, and paused with the exported RaftNode.PauseApply,
// which the server itself uses while it catches a replica up.
func (c *Cluster) PauseApply(node, stream string) (resume func()) {
	c.t.Helper()
	group := c.raftGroup(stream)
	rn := c.raftNodeOf(node, group)
	leader := c.raftNodeOf(c.StreamLeader(stream, 10*time.Second), group)
	_, _, want := leader.Progress()
	require.Eventually(c.t, func() bool {
		_, _, applied := rn.Progress()
		return applied >= want
	}, 10*time.Second, 5*time.Millisecond, "%s's replica on %s never applied what its leader had (%d)", stream, node, want)
	require.NoError(c.t, rn.PauseApply(), "pausing %s's replica on %s (it must not lead)", stream, node)
	var once sync.Once
	resume = func() { once.Do(rn.ResumeApply) }
	c.t.Cleanup(resume)
	return resume
}

// raftNodeOf is node's member of Raft group group.
func (c *Cluster) raftNodeOf(node, group string) server.RaftNode {
	c.t.Helper()
	n := c.Node(node)
	require.NotNil(c.t, n.Server, "node %s: an embedded node that runs", node)
	rn, err := raftNode(n.Server, group)
	require.NoError(c.t, err)
	require.NotNil(c.t, rn, "node %s has no member of Raft group %s", node, group)
	return rn
}

// raftGroup is the name of stream's Raft group, as STREAM.INFO says.
func (c *Cluster) raftGroup(stream string) string {
	c.t.Helper()
	nc := c.Conn()
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(c.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	require.NoError(c.t, err, "stream %s", stream)
	info := s.CachedInfo()
	require.True(c.t, info.Cluster != nil && info.Cluster.RaftGroup != "", "stream %s has no Raft group (not clustered?)", stream)
	return info.Cluster.RaftGroup
}

// raftNode returns s's Raft node of group (nil: none), reading the server's unexported
// raftNodes map under its rnMu; an error if this nats-server has them elsewhere.
func raftNode(s *server.Server, group string) (server.RaftNode, error) {
	v := reflect.ValueOf(s).Elem()
	muField, nodesField := v.FieldByName("rnMu"), v.FieldByName("raftNodes")
	if !muField.IsValid() || muField.Type() != reflect.TypeFor[sync.RWMutex]() ||
		!nodesField.IsValid() || nodesField.Type() != reflect.TypeFor[map[string]server.RaftNode]() {
		return nil, fmt.Errorf("this nats-server keeps its Raft groups elsewhere than Server.rnMu and Server.raftNodes")
	}
	mu := (*sync.RWMutex)(unsafe.Pointer(muField.UnsafeAddr()))
	nodes := (*map[string]server.RaftNode)(unsafe.Pointer(nodesField.UnsafeAddr()))
	mu.RLock()
	defer mu.RUnlock()
	return (*nodes)[group], nil
}

// WaitForDirectGets waits (up to 10 s) until node's replica of stream answers direct gets: a
// follower joins the direct gets' queue group only once it has caught up (nats-server checks
// every 2 s); until then the other replicas answer for it.
func (c *Cluster) WaitForDirectGets(node, stream string) {
	c.t.Helper()
	n := c.Node(node)
	require.NotNil(c.t, n.Server, "node %s: an embedded node that runs", node)
	subject := "$JS.API.DIRECT.GET." + stream
	require.Eventually(c.t, func() bool {
		sz, err := n.Server.Subsz(&server.SubszOptions{Subscriptions: true, Test: subject})
		if err != nil {
			return false
		}
		for _, sub := range sz.Subs {
			if sub.Subject == subject { // not the API's own $JS.API.>
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "node %s never answered direct gets of %s", node, stream)
}
