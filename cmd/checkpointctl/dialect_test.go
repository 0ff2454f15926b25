package main

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// TestCheckpointctl_PutDialect: put --dialect saves another runtime's history as it is (the README's
// example); without it the same file is refused as native (exit 5); an unknown name is refused.
func TestCheckpointctl_PutDialect(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()
	const file = "../../testdata/dialects/anthropic.json"
	_, stderr, code := ctl(t, "", srv, "put", "chat", file)
	require.Equal(t, 5, code, "refused as native")
	require.Contains(t, stderr, "name its shape with --dialect: ", "the refusal points at --dialect")
	require.Contains(t, stderr, "anthropic")
	_, stderr, code = ctl(t, "", srv, "put", "chat", file, "--dialect", "native")
	require.Equal(t, 5, code, "refused as native, asked for")
	require.NotContains(t, stderr, "--dialect:", "no hint when the dialect was named")
	out, stderr, code := ctl(t, "", srv, "put", "chat", file, "--dialect", "anthropic", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var v checkpoint.Version
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, "anthropic", v.Dialect)
	out, stderr, code = ctl(t, "", srv, "restore", "chat")
	require.Equal(t, 0, code, stderr)
	want, err := os.ReadFile(file)
	require.NoError(t, err)
	requireSameJSON(t, want, []byte(out))
	_, stderr, code = ctl(t, "", srv, "put", "other", file, "--dialect", "claude")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "Cp-Dialect")
}
