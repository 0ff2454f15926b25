package testenv

import (
	"context"
	"io"
	"log/slog"
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

// Tenancy is a deployment whose embedded server requires logins (checkpointd --tenants): the
// daemon in its own account, each namespace in another. Clients connect with Conn or Client and
// the credentials of a tenants-file entry.
type Tenancy struct {
	t        testing.TB
	Cfg      embedded.ServerConfig
	Server   *server.Server
	Daemon   *transfer.Daemon
	daemonNC *nats.Conn
}

// StartTenancy runs a server configured with tenants and a daemon logged in to it as itself.
// maxPayload (0: NATS's default) lowers the server's max_payload, for chunked saves.
func StartTenancy(t testing.TB, tenants *embedded.Tenants, maxPayload int32) *Tenancy {
	t.Helper()
	pw, err := embedded.NewDaemonPassword()
	require.NoError(t, err)
	e := &Tenancy{t: t, Cfg: embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:" + strconv.Itoa(freePort(t)),
		MaxPayload: maxPayload, Tenants: tenants, DaemonPassword: pw}}
	e.Server, err = embedded.StartServer(e.Cfg)
	require.NoError(t, err)
	t.Cleanup(func() { e.Server.Shutdown(); e.Server.WaitForShutdown() })
	e.Daemon, e.daemonNC = StartDaemonAt(t, e.URL(), nats.UserInfo(embedded.DaemonUser, pw))
	return e
}

// URL is the client URL of the server.
func (e *Tenancy) URL() string { return "nats://" + e.Cfg.Listen }

// Conn connects to the server with opts (credentials); the connection closes when the test ends.
func (e *Tenancy) Conn(opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(e.URL(), append([]nats.Option{nats.MaxReconnects(0)}, opts...)...)
	if err == nil {
		e.t.Cleanup(nc.Close)
	}
	return nc, err
}

// Client is an SDK client over Conn(opts...), failing the test if it cannot connect.
func (e *Tenancy) Client(opts ...nats.Option) *checkpoint.Client {
	e.t.Helper()
	nc, err := e.Conn(opts...)
	require.NoError(e.t, err)
	c, err := checkpoint.New(nc, checkpoint.WithTimeout(5*time.Second))
	require.NoError(e.t, err)
	return c
}

// Reload applies a changed tenants file to the running server, as SIGHUP does.
func (e *Tenancy) Reload(tenants *embedded.Tenants) error {
	cfg := e.Cfg
	cfg.Tenants = tenants
	if err := embedded.ReloadServer(e.Server, cfg); err != nil {
		return err
	}
	e.Cfg = cfg
	return nil
}

// DaemonConn is the daemon's own connection (its account holds every stream): for checking, from
// the inside, that an attack changed nothing.
func (e *Tenancy) DaemonConn() *nats.Conn { return e.daemonNC }

// StartDaemonAt opens a daemon on a connection to url made with opts; both stop when the test ends.
func StartDaemonAt(t testing.TB, url string, opts ...nats.Option) (*transfer.Daemon, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("checkpointd-test")}, opts...)...)
	require.NoError(t, err)
	cfg := transfer.DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Metrics = metrics.New(prometheus.NewRegistry())
	cfg.Engine.NoPack = true // nothing changes the streams but clients (no pack after a save): tests compare them before and after attacks
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := transfer.Open(ctx, nc, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Close(ctx)
		nc.Close()
	})
	return d, nc
}

// StartTenancyFromConfig runs a nats-server loaded from the configuration file confPath as
// `nats-server -c` loads it (it must listen on listen), and a daemon that reaches it as an
// external cluster, logging in as DaemonUser with password: what an operator who ran
// `checkpointd --print-nats-config` and `checkpointd --nats-url` gets.
func StartTenancyFromConfig(t testing.TB, confPath, listen, password string) *Tenancy {
	t.Helper()
	opts, err := server.ProcessConfigFile(confPath)
	require.NoError(t, err)
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server from %s not ready", confPath)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	e := &Tenancy{t: t, Cfg: embedded.ServerConfig{Listen: listen}, Server: s}
	e.Daemon, e.daemonNC = StartDaemonAt(t, e.URL(), nats.UserInfo(embedded.DaemonUser, password))
	return e
}

// FreeAddr is a loopback host:port nobody listens on (yet).
func FreeAddr(t testing.TB) string { return "127.0.0.1:" + strconv.Itoa(freePort(t)) }
