package testenv

import (
	"context"
	"io"
	"log/slog"
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
)

// Cluster is a real JetStream cluster of embedded nats-servers, each with its own directory and
// random ports, routed to one another.
type Cluster struct {
	t     testing.TB
	Nodes []*Node
}

// Node is one server of a Cluster.
type Node struct {
	Name, Dir, Listen, ClusterListen string
	Server                           *server.Server // nil while killed
}

// StartCluster starts n servers and waits until JetStream has a leader. Everything stops when the
// test ends. Ports are picked free, but another process may take one before a server binds it:
// then the whole cluster starts again on new ports (up to three times).
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		c := &Cluster{t: t}
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
	s, err := transfer.StartServer(transfer.ServerConfig{DataDir: node.Dir, Listen: node.Listen, Name: node.Name,
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

// Kill shuts one server down at once, as losing its machine would.
func (c *Cluster) Kill(name string) {
	node := c.Node(name)
	if node.Server != nil {
		node.Server.Shutdown()
		node.Server.WaitForShutdown()
		node.Server = nil
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
			if node.Server == nil {
				continue
			}
			info, err := node.Server.Jsz(nil)
			if err != nil || info.Meta == nil || info.Meta.Leader == "" {
				return false
			}
			if info.Meta.Leader == node.Name {
				live := 0
				for _, p := range info.Meta.Replicas {
					if p.Current && !p.Offline {
						live++
					}
				}
				if live < c.live()-1 {
					return false
				}
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "JetStream cluster never elected a leader")
}

func (c *Cluster) live() int {
	n := 0
	for _, node := range c.Nodes {
		if node.Server != nil {
			n++
		}
	}
	return n
}

// Conn connects to the cluster (any node, reconnecting to the others).
func (c *Cluster) Conn() *nats.Conn {
	c.t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	require.NoError(c.t, err)
	return nc
}

// StartDaemon runs a checkpointd daemon against the cluster; it stops when the test ends.
func (c *Cluster) StartDaemon(tweak ...func(*transfer.Config)) *transfer.Daemon {
	c.t.Helper()
	cfg := transfer.DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Metrics = metrics.New(prometheus.NewRegistry())
	for _, f := range tweak {
		f(&cfg)
	}
	nc := c.Conn()
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
	nc := c.Conn()
	c.t.Cleanup(nc.Close)
	cl, err := checkpoint.New(nc, opts...)
	require.NoError(c.t, err)
	return cl
}
