package testenv

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// Cluster is a real JetStream cluster of nats-servers, each with its own directory and random
// ports, routed to one another: embedded in the test process (StartCluster) or each in a process of
// its own (StartCrashCluster, crash.go).
type Cluster struct {
	t      testing.TB
	Nodes  []*Node
	routes []string // every node's route URL, for restarting one
	crash  bool     // nodes are child processes, and Kill is SIGKILL
}

// Node is one server of a Cluster.
type Node struct {
	Name, Dir, Listen, ClusterListen string
	Server                           *server.Server // an embedded node; nil while killed

	proc    *exec.Cmd      // a crash cluster's node; nil while killed
	stdin   io.WriteCloser // closing it ends the node, should the test not
	control string         // host:port where the node answers queries (crash.go)
}

// Alive reports whether the node runs (it was not killed, or was restarted since).
func (n *Node) Alive() bool { return n.Server != nil || n.proc != nil }

// StartCluster starts n embedded servers and waits until JetStream has a leader. Everything stops
// when the test ends. Kill shuts a node down gracefully: its leaders hand over first.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return startCluster(t, n, false)
}

// StartCrashCluster starts n servers as child processes (see crash.go) and waits until JetStream
// has a leader; Kill is SIGKILL, and the cluster must notice the death by itself, as it would a
// crash. The package's TestMain must call RunNodeIfChild.
func StartCrashCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return startCluster(t, n, true)
}

// startCluster starts the nodes. Ports are picked free, but another process may take one before a
// server binds it: then the whole cluster starts again on new ports (up to three times).
func startCluster(t testing.TB, n int, crash bool) *Cluster {
	t.Helper()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		c := &Cluster{t: t, crash: crash}
		if err = c.startNodes(n); err == nil {
			t.Cleanup(func() {
				for _, node := range c.Nodes {
					c.Kill(node.Name)
				}
			})
			c.WaitForJetStream()
			return c
		}
		for _, node := range c.Nodes {
			c.Kill(node.Name)
		}
	}
	require.NoError(t, err, "starting a %d-node cluster", n)
	return nil
}

// startNodes starts n routed servers on fresh ports and directories.
func (c *Cluster) startNodes(n int) error {
	var routes []string
	for i := 0; i < n; i++ {
		node := &Node{Name: "n" + strconv.Itoa(i+1), Dir: c.t.TempDir(),
			Listen: "127.0.0.1:" + strconv.Itoa(freePort(c.t)), ClusterListen: "127.0.0.1:" + strconv.Itoa(freePort(c.t))}
		c.Nodes = append(c.Nodes, node)
		routes = append(routes, "nats-route://"+node.ClusterListen)
	}
	c.routes = routes
	errs := make(chan error, n)
	for _, node := range c.Nodes {
		go func() { errs <- c.start(node, routes) }()
	}
	var first error
	for range c.Nodes {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (c *Cluster) start(node *Node, routes []string) error {
	if c.crash {
		return c.startProcess(node, routes)
	}
	s, err := embedded.StartServer(embedded.ServerConfig{DataDir: node.Dir, Listen: node.Listen, Name: node.Name,
		ClusterName: "cp-test", ClusterListen: node.ClusterListen, Routes: routes})
	node.Server = s
	return err
}

// URLs is the client URL list of every node, for nats.Connect.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, node := range c.Nodes {
		urls[i] = "nats://" + node.Listen
	}
	return strings.Join(urls, ",")
}

// Node returns the node named name.
func (c *Cluster) Node(name string) *Node {
	for _, node := range c.Nodes {
		if node.Name == name {
			return node
		}
	}
	c.t.Fatalf("no node %q", name)
	return nil
}

// Kill stops one server: in a crash cluster at once (SIGKILL), otherwise with a graceful shutdown.
func (c *Cluster) Kill(name string) {
	node := c.Node(name)
	if node.proc != nil {
		killProcess(node)
	}
	if node.Server != nil {
		node.Server.Shutdown()
		node.Server.WaitForShutdown()
		node.Server = nil
	}
}

// Restart starts a killed node again on its own directory and ports, as a machine coming back
// would: it rejoins the cluster and catches its replicas up. A port another process took meanwhile
// fails the test.
func (c *Cluster) Restart(name string) {
	c.t.Helper()
	node := c.Node(name)
	if node.Alive() {
		return
	}
	require.NoError(c.t, c.start(node, c.routes), "restarting %s", name)
}

// StreamLeader returns the name of the node leading stream (a KV bucket's stream is KV_<bucket>),
// waiting up to timeout for one to be elected; "" if none was.
func (c *Cluster) StreamLeader(stream string, timeout time.Duration) string {
	return c.leader(timeout, query{StreamLeader: stream})
}

// ConsumerLeader returns the name of the node leading consumer of stream, as StreamLeader does.
func (c *Cluster) ConsumerLeader(stream, consumer string, timeout time.Duration) string {
	return c.leader(timeout, query{ConsumerStream: stream, Consumer: consumer})
}

// MetaLeader returns the name of the node leading the JetStream meta group, as StreamLeader does.
func (c *Cluster) MetaLeader(timeout time.Duration) string {
	return c.leader(timeout, query{Meta: true})
}

// StepDown asks the leader of stream (of its consumer, if consumer is not "") to hand its
// leadership to another replica, and waits until one has it (up to timeout). A test uses it to put
// leaders where it wants them before a kill.
func (c *Cluster) StepDown(stream, consumer string, timeout time.Duration) {
	c.t.Helper()
	nc := c.Conn()
	defer nc.Close()
	subject := "$JS.API.STREAM.LEADER.STEPDOWN." + stream
	if consumer != "" {
		subject = "$JS.API.CONSUMER.LEADER.STEPDOWN." + stream + "." + consumer
	}
	reply, err := nc.Request(subject, nil, timeout)
	require.NoError(c.t, err, "stepping down the leader of %s %s", stream, consumer)
	require.NotContains(c.t, string(reply.Data), `"error"`, "stepping down the leader of %s %s", stream, consumer)
}

// LiveNodes names the nodes that run.
func (c *Cluster) LiveNodes() []string {
	var names []string
	for _, node := range c.Nodes {
		if node.Alive() {
			names = append(names, node.Name)
		}
	}
	return names
}

// leader asks each live server whether it leads, until one does or timeout passes. The servers'
// own view is used rather than a stream info request, which goes unanswered while there is no leader.
func (c *Cluster) leader(timeout time.Duration, q query) string {
	deadline := time.Now().Add(timeout)
	for {
		for _, node := range c.Nodes {
			if c.ask(node, q) {
				return node.Name
			}
		}
		if time.Now().After(deadline) {
			return ""
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitForJetStream waits until the cluster answers JetStream requests (a meta leader is elected).
func (c *Cluster) WaitForJetStream() {
	c.t.Helper()
	nc := c.Conn()
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(c.t, err)
	require.Eventually(c.t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := js.AccountInfo(ctx); err != nil {
			return false
		}
		// Every live node must be a current peer, or R3 placement fails.
		for _, node := range c.Nodes {
			if node.Alive() && !c.ask(node, query{MetaLive: c.live()}) {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "JetStream cluster never elected a leader")
}

// WaitForReplicas waits until every stream and durable consumer has a leader and every other node as a
// current replica: a node restarted after a kill has caught up, and the cluster can lose another.
func (c *Cluster) WaitForReplicas() {
	c.t.Helper()
	nc := c.Conn()
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(c.t, err)
	require.Eventually(c.t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return c.allCurrent(ctx, js)
	}, 60*time.Second, 100*time.Millisecond, "streams never had every replica current")
}

// allCurrent reports whether every stream and consumer has a leader and len(Nodes)-1 current followers.
func (c *Cluster) allCurrent(ctx context.Context, js jetstream.JetStream) bool {
	current := func(ci *jetstream.ClusterInfo) bool {
		if ci == nil || ci.Leader == "" || len(ci.Replicas) != len(c.Nodes)-1 {
			return false
		}
		for _, p := range ci.Replicas {
			if !p.Current || p.Offline {
				return false
			}
		}
		return true
	}
	streams := js.ListStreams(ctx)
	n := 0
	for info := range streams.Info() {
		n++
		if !current(info.Cluster) {
			return false
		}
		s, err := js.Stream(ctx, info.Config.Name)
		if err != nil {
			return false
		}
		consumers := s.ListConsumers(ctx)
		for ci := range consumers.Info() {
			if ci.Config.Durable != "" && !current(ci.Cluster) { // ephemeral ones (watchers) are R1
				return false
			}
		}
		if consumers.Err() != nil {
			return false
		}
	}
	return streams.Err() == nil && n > 0
}

func (c *Cluster) live() int {
	n := 0
	for _, node := range c.Nodes {
		if node.Alive() {
			n++
		}
	}
	return n
}

// ask evaluates q on node; a node that is down answers false.
func (c *Cluster) ask(node *Node, q query) bool {
	switch {
	case node.Server != nil:
		return q.answer(node.Server)
	case node.proc != nil:
		return askProcess(node, q)
	}
	return false
}

// Conn connects to the cluster (any node, reconnecting to the others).
func (c *Cluster) Conn() *nats.Conn {
	c.t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	require.NoError(c.t, err)
	return nc
}

// ConnTo connects to the node named name first (the others only once it is gone), so that a test
// knows which node's death a connection sees.
func (c *Cluster) ConnTo(name string) *nats.Conn {
	c.t.Helper()
	urls := []string{"nats://" + c.Node(name).Listen}
	for _, node := range c.Nodes {
		if node.Name != name {
			urls = append(urls, "nats://"+node.Listen)
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.DontRandomize(), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	require.NoError(c.t, err)
	require.Equal(c.t, "nats://"+c.Node(name).Listen, nc.ConnectedUrl(), "connected to %s", name)
	return nc
}

// StartDaemon runs a checkpointd daemon against the cluster; it stops when the test ends.
func (c *Cluster) StartDaemon(tweak ...func(*transfer.Config)) *transfer.Daemon {
	c.t.Helper()
	return c.startDaemon(c.Conn(), tweak)
}

// StartDaemonOn runs a checkpointd daemon connected to the node named name (see ConnTo).
func (c *Cluster) StartDaemonOn(name string, tweak ...func(*transfer.Config)) *transfer.Daemon {
	c.t.Helper()
	return c.startDaemon(c.ConnTo(name), tweak)
}

// startDaemon runs a daemon on nc, which it closes when the test ends.
func (c *Cluster) startDaemon(nc *nats.Conn, tweak []func(*transfer.Config)) *transfer.Daemon {
	c.t.Helper()
	cfg := transfer.DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Metrics = metrics.New(prometheus.NewRegistry())
	for _, f := range tweak {
		f(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := transfer.Open(ctx, nc, cfg)
	require.NoError(c.t, err)
	c.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Close(ctx)
		nc.Close()
	})
	return d
}

// Client returns an SDK client connected to the cluster.
func (c *Cluster) Client(opts ...checkpoint.Option) *checkpoint.Client {
	c.t.Helper()
	return c.client(c.Conn(), opts)
}

// ClientOn returns an SDK client connected to the node named name (see ConnTo).
func (c *Cluster) ClientOn(name string, opts ...checkpoint.Option) *checkpoint.Client {
	c.t.Helper()
	return c.client(c.ConnTo(name), opts)
}

// client is an SDK client on nc, which it closes when the test ends.
func (c *Cluster) client(nc *nats.Conn, opts []checkpoint.Option) *checkpoint.Client {
	c.t.Helper()
	c.t.Cleanup(nc.Close)
	cl, err := checkpoint.New(nc, opts...)
	require.NoError(c.t, err)
	return cl
}
