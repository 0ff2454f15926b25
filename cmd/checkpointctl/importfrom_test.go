package main

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint/importer"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// TestCheckpointctl_ImportFrom: a real Claude Code transcript and a Gemini CLI session become
// sessions; restored, they give their files back record for record (importer.Export); a second
// import into the same session is a conflict (4), a file of another shape refused input (5), an
// unknown runtime a usage mistake (2); bundles still import without --from.
func TestCheckpointctl_ImportFrom(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()
	for _, tc := range []struct{ format, file string }{
		{"claude-code", "../../testdata/import/claude_code_spotter_258c7280.jsonl"},
		{"gemini-cli", "../../testdata/import/gemini_cli_codemie_session.json"},
	} {
		out, stderr, code := ctl(t, "", srv, "import", "--from", tc.format, tc.file, "--session", tc.format, "-o", "json")
		require.Equal(t, 0, code, stderr)
		var sum struct {
			Version  uint64 `json:"version"`
			Messages int    `json:"messages"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &sum))
		require.Equal(t, uint64(1), sum.Version)

		restored, stderr, code := ctl(t, "", srv, "restore", tc.format)
		require.Equal(t, 0, code, stderr)
		var msgs []json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(restored), &msgs))
		require.Len(t, msgs, sum.Messages)
		format, back, err := importer.Export([]byte(restored))
		require.NoError(t, err)
		require.Equal(t, tc.format, format)
		file, err := os.ReadFile(tc.file)
		require.NoError(t, err)
		require.True(t, sameRecords(t, file, back), "%s: the records came back changed", tc.file)
	}

	out, stderr, code := ctl(t, "", srv, "import", "--from", "gemini-cli", "../../testdata/import/gemini_cli_codemie_session.json", "--session", "gemini-cli")
	require.Equal(t, 4, code, "the session exists: %s %s", out, stderr)
	_, stderr, code = ctl(t, "", srv, "import", "--from", "pi", "../../testdata/import/gemini_cli_codemie_session.json", "--session", "x")
	require.Equal(t, 5, code, stderr)
	_, _, code = ctl(t, "", srv, "import", "--from", "cursor", "f.jsonl", "--session", "x")
	require.Equal(t, 2, code)
	_, _, code = ctl(t, "", srv, "import", "--from", "pi", "../../testdata/import/pi_before_compaction.jsonl")
	require.Equal(t, 2, code, "no --session")
	out, stderr, code = ctl(t, "", srv, "import", "--from", "openhands", "../../testdata/import/openhands_multi_swe_bench.jsonl",
		"--row", "2", "--session", "oh", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "103 records -> 104 messages")
	_, _, code = ctl(t, "", srv, "restore", "oh")
	require.Equal(t, 3, code, "a dry run saves nothing")
}

func sameRecords(t *testing.T, a, b []byte) bool {
	t.Helper()
	read := func(x []byte) []any {
		d := json.NewDecoder(bytes.NewReader(x))
		d.UseNumber()
		var out []any
		for d.More() {
			var v any
			require.NoError(t, d.Decode(&v))
			out = append(out, v)
		}
		return out
	}
	return reflect.DeepEqual(read(a), read(b))
}
