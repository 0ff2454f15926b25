package main

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint/conv"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// TestCheckpointctl_Stats: stats -o json prints the trackers rebuilt from the version's messages
// (what conv.Track gives for the saved file), for the head and for --version; the table shows the
// room left in --context-window; a session of another dialect is tracked from its own shape.
func TestCheckpointctl_Stats(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()
	const pi = "../../testdata/corpus/pi_before_compaction.json"
	_, stderr, code := ctl(t, "", srv, "put", "demo", pi)
	require.Equal(t, 0, code, stderr)
	_, stderr, code = ctl(t, "", srv, "put", "demo", corpusFile)
	require.Equal(t, 0, code, stderr)

	file, err := os.ReadFile(pi)
	require.NoError(t, err)
	c, err := conv.Decode("native", file)
	require.NoError(t, err)
	want := conv.Track(c, 200000)

	out, stderr, code := ctl(t, "", srv, "stats", "demo", "--version", "1", "--context-window", "200000", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var got statsReport
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, uint64(1), got.Version)
	require.True(t, reflect.DeepEqual(want, got.Trackers), "got %+v", got.Trackers)

	out, stderr, code = ctl(t, "", srv, "stats", "demo", "--version", "1", "--context-window", "200000")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "1003 in 55 turn(s)")
	require.Contains(t, out, "window 200000:")
	require.Contains(t, out, "TOOL")

	out, stderr, code = ctl(t, "", srv, "stats", "demo", "-o", "json") // the head: another conversation
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, uint64(2), got.Version)
	require.Equal(t, 18, got.Messages)

	_, stderr, code = ctl(t, "", srv, "put", "ag", "../../testdata/dialects/antigravity.json", "--dialect", "antigravity")
	require.Equal(t, 0, code, stderr)
	out, stderr, code = ctl(t, "", srv, "stats", "ag", "-o", "json")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, "antigravity", got.Dialect)
	require.Equal(t, []int{3}, got.Compactions)
	require.Equal(t, 1, got.Tools["grep_search"].Calls)

	_, _, code = ctl(t, "", srv, "stats", "demo", "--context-window", "-1")
	require.Equal(t, 2, code)
	_, _, code = ctl(t, "", srv, "stats", "nosuch")
	require.Equal(t, 3, code)
}
