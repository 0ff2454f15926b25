package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint/conv"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// TestCheckpointctl_RestoreAs: restore --as writes the provider view (the golden file of
// checkpoint/conv), refuses what it cannot carry with exit 5 naming the message and the part,
// shapes a real compacted session's request view for sending, and leaves what is stored as saved.
func TestCheckpointctl_RestoreAs(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()

	_, stderr, code := ctl(t, "", srv, "put", "coding", "../../checkpoint/conv/testdata/anthropic.json", "--dialect", "anthropic")
	require.Equal(t, 0, code, stderr)
	out, stderr, code := ctl(t, "", srv, "restore", "coding", "--as", "openai-chat")
	require.Equal(t, 0, code, stderr)
	want, err := os.ReadFile("../../checkpoint/conv/testdata/pairs/anthropic-coding.as-openai-chat.json")
	require.NoError(t, err)
	requireSameJSON(t, want, []byte(out))

	// The anthropic fixture holds a redacted_thinking block, which native has no type for.
	_, stderr, code = ctl(t, "", srv, "put", "redacted", "../../testdata/dialects/anthropic.json", "--dialect", "anthropic")
	require.Equal(t, 0, code, stderr)
	out, stderr, code = ctl(t, "", srv, "restore", "redacted", "--as", "native")
	require.Equal(t, 5, code, stderr)
	require.Empty(t, out)
	require.Contains(t, stderr, "message 4")
	require.Contains(t, stderr, `"redacted_thinking"`)

	// A real pi session, compacted: its request view as anthropic, ready to send.
	const pi = "../../testdata/corpus/pi_before_compaction.json"
	_, stderr, code = ctl(t, "", srv, "put", "pi", pi)
	require.Equal(t, 0, code, stderr)
	_, stderr, code = ctl(t, "", srv, "restore", "pi", "--view", "request", "--as", "anthropic")
	require.Equal(t, 5, code, "the compaction marker has no place in anthropic: %s", stderr)
	require.Contains(t, stderr, `kind "compaction"`)
	out, stderr, code = ctl(t, "", srv, "restore", "pi", "--view", "request", "--as", "anthropic",
		"--compaction-as-user", "--omit", "extensions", "--cache-control", "2", "--reminder", "Keep going.")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "left out of the anthropic view")
	var msgs []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &msgs))
	first, _ := msgs[0]["content"].(string)
	require.Equal(t, "user", msgs[0]["role"])
	require.True(t, strings.HasPrefix(first, conv.CompactionPreamble), first)
	require.Equal(t, 2, strings.Count(out, `"cache_control"`))
	require.Contains(t, out, "Keep going.")
	// With --omit members, every message is what the API takes: role and content.
	out, stderr, code = ctl(t, "", srv, "restore", "pi", "--view", "request", "--as", "anthropic",
		"--compaction-as-user", "--omit", "extensions,members")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "member timestamp")
	msgs = nil
	require.NoError(t, json.Unmarshal([]byte(out), &msgs))
	for i, m := range msgs {
		for k := range m {
			require.Contains(t, []string{"role", "content"}, k, "message %d", i)
		}
	}

	// Nothing stored changed.
	out, _, code = ctl(t, "", srv, "restore", "pi")
	require.Equal(t, 0, code)
	file, err := os.ReadFile(pi)
	require.NoError(t, err)
	requireSameJSON(t, file, []byte(out))
	require.False(t, bytes.Contains([]byte(out), []byte("cache_control")))

	// Usage mistakes, before connecting.
	for _, args := range [][]string{
		{"restore", "pi", "--as", "openai-chat", "--cache-control", "1"},
		{"restore", "pi", "--omit", "thinking"},
		{"restore", "pi", "--as", "claude"},
		{"restore", "pi", "--as", "native", "--omit", "images"},
		{"restore", "pi", "--as", "native", "--merged"},
		{"restore", "pi", "--as", "native", "--omit", "members"},
	} {
		_, stderr, code := ctl(t, "", append([]string{srv}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
	}
}
