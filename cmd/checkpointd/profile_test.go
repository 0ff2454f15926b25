package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// --cpuprofile writes a Go CPU profile (gzip-compressed protobuf) of the daemon's run, finished
// when it shuts down; a file it cannot create stops the start with the flag's name in the error.
func TestRun_CPUProfileWrittenAtShutdown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	httpAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--http-listen", httpAddr,
			"--cpuprofile", path}, io.Discard)
	}()
	waitHTTP(t, "http://"+httpAddr+"/healthz", http.StatusOK)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Greater(t, len(b), 2)
	require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "a pprof profile is gzip-compressed")

	err = run(context.Background(), []string{"--data-dir", t.TempDir(), "--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.prof")}, io.Discard)
	require.ErrorContains(t, err, "--cpuprofile")
}
