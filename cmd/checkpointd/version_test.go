package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// checkpointd --version prints the build and exits 0 without starting anything (no data directory
// is created, no port is taken).
func TestCheckpointd_Version(t *testing.T) {
	cmd := exec.Command(daemonBinary(t), "--version")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	line := string(out)
	require.True(t, strings.HasPrefix(line, "checkpointd version "), line)
	for _, want := range []string{"commit ", "go1.", "protocol " + wire.ProtocolVersion, "storage format: version records "} {
		require.Contains(t, line, want)
	}
	require.Equal(t, 1, strings.Count(line, "\n"), line)
	entries, err := os.ReadDir(cmd.Dir)
	require.NoError(t, err)
	require.Empty(t, entries, "--version wrote to the working directory")
}
