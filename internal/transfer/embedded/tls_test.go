package embedded_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// runEmbedded runs an embedded server as cfg says and a daemon on its in-process connection,
// as checkpointd does; both stop when the test ends.
func runEmbedded(t *testing.T, cfg embedded.ServerConfig) *server.Server {
	t.Helper()
	s, _ := runEmbeddedStoppable(t, cfg)
	return s
}

// runEmbeddedStoppable is runEmbedded that also returns how to stop it before the test ends.
func runEmbeddedStoppable(t *testing.T, cfg embedded.ServerConfig) (*server.Server, func()) {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	cfg.Listen = "127.0.0.1:0"
	s, err := embedded.StartServer(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(embedded.InProcessURL(s), nats.InProcessServer(s))
	require.NoError(t, err, "the daemon's in-process connection needs no TLS")
	t.Cleanup(nc.Close)
	var once sync.Once
	dcfg := transfer.DefaultConfig()
	dcfg.Logger, dcfg.Metrics = slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := transfer.Open(ctx, nc, dcfg)
	require.NoError(t, err)
	stop := func() {
		once.Do(func() {
			_ = d.Close(context.Background())
			nc.Close()
			s.Shutdown()
			s.WaitForShutdown()
		})
	}
	t.Cleanup(stop)
	return s, stop
}

func saveAndRestore(t *testing.T, c *checkpoint.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conv := []byte(`[{"role":"user","content":"over TLS"}]`)
	key := checkpoint.Key{Session: "tls"}
	_, err := c.Save(ctx, key, conv)
	require.NoError(t, err)
	got, _, err := c.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, string(conv), string(got))
}

func TestServerTLS_ClientsNeedTheRightCA(t *testing.T) {
	pki, other := testenv.NewPKI(t), testenv.NewPKI(t)
	s := runEmbedded(t, embedded.ServerConfig{TLS: embedded.ServerTLS{CertFile: pki.ServerCert, KeyFile: pki.ServerKey}})
	require.True(t, strings.HasPrefix(s.ClientURL(), "tls://"), s.ClientURL())
	url := "nats://" + s.Addr().String()

	t.Run("right CA: save and restore", func(t *testing.T) {
		c, err := checkpoint.Connect(url, []nats.Option{nats.RootCAs(pki.CA)})
		require.NoError(t, err)
		defer c.Close()
		saveAndRestore(t, c)
	})
	t.Run("wrong CA: refused, saying why", func(t *testing.T) {
		_, err := checkpoint.Connect(url, []nats.Option{nats.RootCAs(other.CA)})
		require.ErrorIs(t, err, checkpoint.ErrUnavailable)
		require.ErrorContains(t, err, "certificate signed by unknown authority")
	})
	t.Run("no CA (system roots): refused", func(t *testing.T) {
		_, err := checkpoint.Connect(url, nil)
		require.ErrorIs(t, err, checkpoint.ErrUnavailable)
		require.ErrorContains(t, err, "certificate")
	})
	t.Run("plain TCP: refused", func(t *testing.T) {
		requirePlainRefused(t, s.Addr().String())
	})
}

// requirePlainRefused speaks the NATS protocol in plain text, as a client that ignores
// tls_required would: the server must never answer its PING.
func requirePlainRefused(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, info, `"tls_required":true`)
	_, err = conn.Write([]byte("CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPING\r\nSUB > 1\r\n"))
	require.NoError(t, err)
	rest, _ := io.ReadAll(r) // until the server closes the connection (or the deadline)
	require.NotContains(t, string(rest), "PONG", "a plain-text client was served")
}

func TestServerTLS_MutualTLSNeedsAClientCertificate(t *testing.T) {
	pki := testenv.NewPKI(t)
	s := runEmbedded(t, embedded.ServerConfig{TLS: embedded.ServerTLS{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA}})
	url := "nats://" + s.Addr().String()

	_, err := checkpoint.Connect(url, []nats.Option{nats.RootCAs(pki.CA)})
	require.ErrorIs(t, err, checkpoint.ErrUnavailable, "no client certificate")

	// A certificate from another CA is no better.
	other := testenv.NewPKI(t)
	_, err = checkpoint.Connect(url, []nats.Option{nats.RootCAs(pki.CA), nats.ClientCert(other.ClientCert, other.ClientKey)})
	require.ErrorIs(t, err, checkpoint.ErrUnavailable, "a client certificate of another CA")

	c, err := checkpoint.Connect(url, []nats.Option{nats.RootCAs(pki.CA), nats.ClientCert(pki.ClientCert, pki.ClientKey)})
	require.NoError(t, err)
	defer c.Close()
	saveAndRestore(t, c)
}

func TestServerTLS_BadFilesAreClearErrors(t *testing.T) {
	pki := testenv.NewPKI(t)
	for name, tc := range map[string]struct {
		tls  embedded.ServerTLS
		want string
	}{
		"key without cert": {embedded.ServerTLS{KeyFile: pki.ServerKey}, "--tls-cert and --tls-key"},
		"missing cert":     {embedded.ServerTLS{CertFile: "/nonexistent/cert.pem", KeyFile: pki.ServerKey}, "/nonexistent/cert.pem"},
		"key is no key":    {embedded.ServerTLS{CertFile: pki.ServerCert, KeyFile: pki.CA}, "--tls-key"},
		"missing CA":       {embedded.ServerTLS{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", TLS: tc.tls})
			require.ErrorContains(t, err, tc.want)
		})
	}
}
