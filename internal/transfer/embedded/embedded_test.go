package embedded_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/stretchr/testify/require"
)

// When the embedded server cannot start, StartServer says why at once, instead of waiting out its
// readiness timeout and saying only that the server did not become ready.
func TestStartServer_SaysWhyItCannotStart(t *testing.T) {
	t.Run("port taken", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		_, err = embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: l.Addr().String()})
		require.ErrorContains(t, err, l.Addr().String())
		require.ErrorContains(t, err, "address already in use")
	})
	t.Run("store not usable", func(t *testing.T) {
		// JetStream keeps its store in <data dir>/jetstream; a file there stands for any store the
		// server cannot create (permissions do not stop root, who runs CI).
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "jetstream"), nil, 0o600))
		_, err := embedded.StartServer(embedded.ServerConfig{DataDir: dir, Listen: "127.0.0.1:0"})
		require.ErrorContains(t, err, dir)
		require.ErrorContains(t, err, "Can't start JetStream")
		require.ErrorContains(t, err, "not a directory")
	})
}
