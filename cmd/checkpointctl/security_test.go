package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// bundleText is a bundle file decompressed: the tar stream, whose entries are JSON text.
func bundleText(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	zr, err := zstd.NewReader(f)
	require.NoError(t, err)
	defer zr.Close()
	data, err := io.ReadAll(zr)
	require.NoError(t, err)
	return string(data)
}

// export --redact-image-paths writes a bundle without the local paths of image parts, that
// verifies on its own and imports (into a daemon that refuses local paths) as the redacted
// conversations; without the flag the path is in the bundle.
func TestCheckpointctl_ExportRedactImagePaths(t *testing.T) {
	src := testenv.Start(t, func(c *transfer.Config) { c.ImagePaths = codec.ImagePathsAllow })
	dst := testenv.Start(t) // refuses local paths (the default)
	const path = "file:///Users/alice/Secret%20Project/screen.png"
	v1 := `[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","url":"` + path + `"}]}]`
	v2 := v1[:len(v1)-1] + `,{"role":"assistant","content":[{"type":"text","text":"I see it"}]}]`
	for _, conv := range []string{v1, v2} {
		_, stderr, code := ctl(t, conv, "--server", src.URL(), "put", "shots", "-")
		require.Equal(t, 0, code, stderr)
	}
	dir := t.TempDir()
	plain, redacted := filepath.Join(dir, "plain.bundle"), filepath.Join(dir, "redacted.bundle")
	_, stderr, code := ctl(t, "", "--server", src.URL(), "export", "shots", "--file", plain)
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.Contains(bundleText(t, plain), "/Users/alice"), "without the flag the path is exported (or this test proves nothing)")

	_, stderr, code = ctl(t, "", "--server", src.URL(), "export", "shots", "--file", redacted, "--redact-image-paths")
	require.Equal(t, 0, code, stderr)
	text := bundleText(t, redacted)
	require.False(t, strings.Contains(text, "/Users/alice"), "the path is in the redacted bundle")
	require.False(t, strings.Contains(text, "Secret"), "a part of the path is in the redacted bundle")
	require.True(t, strings.Contains(text, `"url":"redacted:local-file.png"`), "no redaction marker")

	out, stderr, code := ctl(t, "", "--server", dst.URL(), "import", redacted)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "2 of 2")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for n, want := range []string{v1, v2} {
		got, v, err := dst.Client.Restore(ctx, checkpoint.Key{Session: "shots"}, uint64(n+1))
		require.NoError(t, err)
		require.Equal(t, strings.ReplaceAll(want, path, "redacted:local-file.png"), string(got))
		orig, err := src.Client.Get(ctx, checkpoint.Key{Session: "shots"}, uint64(n+1))
		require.NoError(t, err)
		require.NotEqual(t, orig.Hash, v.Hash, "a redacted version has its own hash")
	}
}

// startTLSDeployment runs an embedded server with tlsCfg and a daemon on its in-process
// connection, as checkpointd --tls-cert does, and returns the client URL.
func startTLSDeployment(t *testing.T, tlsCfg embedded.ServerTLS) string {
	t.Helper()
	s, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", TLS: tlsCfg})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(embedded.InProcessURL(s), nats.InProcessServer(s))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	cfg := transfer.DefaultConfig()
	cfg.Logger, cfg.Metrics = slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := transfer.Open(ctx, nc, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return "nats://" + s.Addr().String()
}

// checkpointctl --tls-ca (and --tls-cert, --tls-key for mutual TLS) against a daemon serving TLS:
// put and restore work with the right CA and certificate; the wrong CA, none, or no client
// certificate are refused as unavailable (exit 6), saying why.
func TestCheckpointctl_TLSFlags(t *testing.T) {
	pki, other := testenv.NewPKI(t), testenv.NewPKI(t)
	url := startTLSDeployment(t, embedded.ServerTLS{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA})
	conv := `[{"role":"user","content":"over mutual TLS"}]`
	good := []string{"--server", url, "--tls-ca", pki.CA, "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey}

	_, stderr, code := ctl(t, conv, append(good, "put", "tls", "-")...)
	require.Equal(t, 0, code, stderr)
	out, stderr, code := ctl(t, "", append(good, "restore", "tls")...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, conv, strings.TrimSpace(out))

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--server", url, "--tls-ca", other.CA, "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey}, "certificate signed by unknown authority"},
		{[]string{"--server", url, "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey}, "certificate"},
		{[]string{"--server", url, "--tls-ca", pki.CA}, "connecting to"},
	} {
		_, stderr, code := ctl(t, "", append(tc.args, "list")...)
		require.Equal(t, exitUnavailable, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, "%v", tc.args)
	}
	_, stderr, code = ctl(t, "", "--server", url, "--tls-cert", pki.ClientCert, "list")
	require.Equal(t, exitUsage, code, stderr)
	require.True(t, bytes.Contains([]byte(stderr), []byte("--tls-cert and --tls-key")), stderr)
}
