// Package testenv starts real checkpointd deployments for tests: an embedded nats-server with
// JetStream on a random port and a temporary directory, a daemon, and a client. Nothing is mocked.
package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// Env is one running deployment.
type Env struct {
	t        testing.TB
	Dir      string
	Listen   string // host:port of the NATS server, stable across Restart
	Config   transfer.Config
	Server   *server.Server
	NC       *nats.Conn // the daemon's connection
	Daemon   *transfer.Daemon
	Registry *prometheus.Registry
	Client   *checkpoint.Client
	clientNC *nats.Conn
	// MaxPayload, when set before StartServer, lowers the server's max_payload.
	MaxPayload int32
}

// Start runs a server and a daemon, and connects a client. Everything stops when the test ends.
// tweak, if given, adjusts the daemon's configuration.
func Start(t testing.TB, tweak ...func(*transfer.Config)) *Env {
	t.Helper()
	return StartWithMaxPayload(t, 0, tweak...)
}

// StartWithMaxPayload is Start on a server whose max_payload is maxPayload bytes (0: the default),
// for tests of what must work in pieces.
func StartWithMaxPayload(t testing.TB, maxPayload int32, tweak ...func(*transfer.Config)) *Env {
	t.Helper()
	cfg := transfer.DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, f := range tweak {
		f(&cfg)
	}
	e := &Env{t: t, Dir: t.TempDir(), Listen: "127.0.0.1:" + strconv.Itoa(freePort(t)), Config: cfg, MaxPayload: maxPayload}
	e.StartServer()
	e.StartDaemon()
	e.Connect()
	t.Cleanup(e.Stop)
	return e
}

// URL is the client URL of the server.
func (e *Env) URL() string { return "nats://" + e.Listen }

// StartServer starts the NATS server on e.Dir and e.Listen.
func (e *Env) StartServer() {
	e.t.Helper()
	s, err := embedded.StartServer(embedded.ServerConfig{DataDir: e.Dir, Listen: e.Listen, MaxPayload: e.MaxPayload})
	require.NoError(e.t, err)
	e.Server = s
}

// StartDaemon opens a daemon on its own connection.
func (e *Env) StartDaemon() {
	e.t.Helper()
	nc, err := nats.Connect(e.URL(), nats.Name("checkpointd-test"))
	require.NoError(e.t, err)
	e.NC = nc
	e.Registry = prometheus.NewRegistry()
	cfg := e.Config
	cfg.Metrics = metrics.New(e.Registry)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := transfer.Open(ctx, nc, cfg)
	require.NoError(e.t, err)
	e.Daemon = d
}

// Conn opens a plain NATS connection to the server for the test to publish on directly; it
// reconnects across Restart and closes when the test ends.
func (e *Env) Conn() *nats.Conn {
	e.t.Helper()
	nc, err := nats.Connect(e.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	require.NoError(e.t, err)
	e.t.Cleanup(nc.Close)
	return nc
}

// StopDaemon closes the daemon gracefully.
func (e *Env) StopDaemon() {
	if e.Daemon == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.Daemon.Close(ctx)
	e.NC.Close()
	e.Daemon, e.NC = nil, nil
}

// CrashDaemon kills the daemon's connection without any shutdown, as a crashed process would:
// saves it had taken but not acknowledged are redelivered to the next daemon.
func (e *Env) CrashDaemon() {
	e.NC.Close()
	e.Daemon, e.NC = nil, nil
}

// Connect (re)connects the test client.
func (e *Env) Connect() {
	e.t.Helper()
	if e.clientNC != nil {
		e.clientNC.Close()
	}
	nc, err := nats.Connect(e.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	require.NoError(e.t, err)
	c, err := checkpoint.New(nc, checkpoint.WithTimeout(20*time.Second))
	require.NoError(e.t, err)
	e.clientNC, e.Client = nc, c
}

// Restart stops the daemon and the server, then starts both again on the same directory and port:
// what survives is what was durable.
func (e *Env) Restart() {
	e.t.Helper()
	e.StopDaemon()
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
	e.StartServer()
	e.StartDaemon()
	e.Connect()
}

// Stop tears everything down.
func (e *Env) Stop() {
	if e.clientNC != nil {
		e.clientNC.Close()
	}
	e.StopDaemon()
	if e.Server != nil {
		e.Server.Shutdown()
		e.Server.WaitForShutdown()
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// RequireSameConversation fails the test unless got is want's canonical form: the same value (every
// number's exact digits, every field, in order) with insignificant white space removed.
func RequireSameConversation(t testing.TB, want, got []byte) {
	t.Helper()
	decode := func(b []byte) any {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		require.NoError(t, d.Decode(&v))
		return v
	}
	require.Equal(t, decode(want), decode(got))
	var compact bytes.Buffer
	require.NoError(t, json.Compact(&compact, want))
	require.True(t, bytes.Equal(compact.Bytes(), got), "restored bytes differ from the compacted input")
}
