package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// Two OS processes, one conversation: the first saves, the second restores and continues.
func TestSaveRestore_AcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example")
	}
	env := testenv.Start(t)
	bin := filepath.Join(t.TempDir(), "saverestore")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)

	out, err = exec.Command(bin, "--server", env.URL(), "save", "tour").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "saved version 2 (4 messages)")

	out, err = exec.Command(bin, "--server", env.URL(), "resume", "tour").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "restored version 2: 4 messages, 2 assistant turns, 30 tokens so far")
	require.Contains(t, string(out), "continued the conversation as version 3")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := env.Client.Get(ctx, checkpoint.Key{Session: "tour"}, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(3), v.Version)
	require.Equal(t, 6, v.Counts.Messages)
	require.Equal(t, 3, v.Counts.Assistant)
}
