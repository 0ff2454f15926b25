package main

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A port picked for the daemon and taken by another process before the daemon listens on it (a
// busy machine: any bind of port 0, any connection out) does not fail the run: the daemon,
// which exits at start saying "address already in use", is started again on new ports.
func TestDaemon_StartsOnNewPortsWhenAPortWasTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs checkpointd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "checkpointd")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/checkpointd/checkpointd/cmd/checkpointd").CombinedOutput()
	require.NoError(t, err, string(out))

	for _, which := range []string{"nats", "http"} {
		t.Run(which, func(t *testing.T) {
			d, err := newDaemon(bin, filepath.Join(tmp, which))
			require.NoError(t, err)
			defer d.log.Close()
			defer d.kill()
			require.NotEqual(t, d.natsAddr, d.httpAddr)
			taken := map[string]string{"nats": d.natsAddr, "http": d.httpAddr}[which]
			l, err := net.Listen("tcp", taken)
			require.NoError(t, err)
			defer l.Close()

			require.NoError(t, d.start(ctx))
			require.NotEqual(t, taken, map[string]string{"nats": d.natsAddr, "http": d.httpAddr}[which])
			require.True(t, healthy(d.httpAddr))
			require.NoError(t, d.stop())
		})
	}
}
