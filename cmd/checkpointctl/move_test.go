package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

func TestCheckpointctl_LeaseMigrateExportImport(t *testing.T) {
	src, dst, third := testenv.Start(t), testenv.Start(t), testenv.Start(t)
	file, err := os.ReadFile(corpusFile)
	require.NoError(t, err)
	grown := string(file[:len(file)-2]) + `,{"role":"user","content":"more"}]`

	_, stderr, code := ctl(t, "", "--server", src.URL(), "put", "demo", corpusFile)
	require.Equal(t, 0, code, stderr)
	_, stderr, code = ctl(t, "", "--server", src.URL(), "put", "demo", corpusFile, "--agent", "helper")
	require.Equal(t, 0, code, stderr)

	// A lease from the command line: writes without its epoch are refused while it holds.
	out, stderr, code := ctl(t, "", "--server", src.URL(), "lease", "acquire", "demo", "--owner", "ops", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var l checkpoint.LeaseInfo
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	require.Equal(t, uint64(1), l.Epoch)
	_, stderr, code = ctl(t, grown, "--server", src.URL(), "put", "demo", "-")
	require.Equal(t, exitConflict, code)
	require.Contains(t, stderr, "leased by ops (epoch 1)")
	_, stderr, code = ctl(t, grown, "--server", src.URL(), "put", "demo", "-", "--epoch", "1")
	require.Equal(t, 0, code, stderr)
	out, _, code = ctl(t, "", "--server", src.URL(), "lease", "status", "demo")
	require.Equal(t, 0, code)
	require.Contains(t, out, "epoch 1, held by ops")
	out, _, code = ctl(t, "", "--server", src.URL(), "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "leased by ops (epoch 1)")

	// Migrate: refused while leased, unless forced; the exact invocation scripts use.
	_, stderr, code = ctl(t, "", "migrate", "--from", src.URL(), "--to", dst.URL(), "demo")
	require.Equal(t, exitConflict, code)
	require.Contains(t, stderr, "leased by ops")
	out, stderr, code = ctl(t, "", "migrate", "--from", src.URL(), "--to", dst.URL(), "demo", "--force", "--progress", "always")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "migrated 2 session(s)")
	require.Contains(t, stderr, "migrate [========================] 2/2 sessions  3 versions", "the progress bar")
	require.Contains(t, out, "3 version(s) copied")
	_, stderr, code = ctl(t, grown, "--server", src.URL(), "put", "demo", "-", "--epoch", "1")
	require.Equal(t, exitConflict, code, "the old owner's late write")
	require.Contains(t, stderr, "moved to "+dst.URL())
	out, _, code = ctl(t, "", "--server", src.URL(), "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "moved to "+dst.URL())
	out, _, code = ctl(t, "", "--server", dst.URL(), "restore", "demo")
	require.Equal(t, 0, code)
	requireSameJSON(t, []byte(grown), []byte(out))
	out, stderr, code = ctl(t, "", "migrate", "--from", src.URL(), "--to", dst.URL(), "demo", "--force")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "0 version(s) copied", "again: idempotent")
	out, _, code = ctl(t, "", "--server", dst.URL(), "show", "demo", "--version", "2")
	require.Equal(t, 0, code)
	require.Contains(t, out, "by migrate from "+src.URL())

	// Export at the destination, import on a third deployment.
	bundle := filepath.Join(t.TempDir(), "demo.cpbundle")
	_, stderr, code = ctl(t, "", "--server", dst.URL(), "export", "demo", "--file", bundle)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "exported 2 session(s), 3 version(s)")
	out, stderr, code = ctl(t, "", "--server", third.URL(), "import", bundle, "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "would import (dry run; verified) 3 of 3")
	data, err := os.ReadFile(bundle)
	require.NoError(t, err)
	truncated := filepath.Join(t.TempDir(), "truncated.cpbundle")
	require.NoError(t, os.WriteFile(truncated, data[:len(data)-40], 0o600))
	_, stderr, code = ctl(t, "", "--server", third.URL(), "import", truncated)
	require.Equal(t, exitCorrupt, code)
	require.Contains(t, stderr, "bad bundle")
	out, stderr, code = ctl(t, "", "--server", third.URL(), "import", bundle)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "imported 3 of 3")
	out, _, code = ctl(t, "", "--server", third.URL(), "restore", "demo")
	require.Equal(t, 0, code)
	requireSameJSON(t, []byte(grown), []byte(out))
	out, _, code = ctl(t, "", "--server", third.URL(), "history", "demo", "-o", "json")
	require.Equal(t, 0, code)
	var hist []checkpoint.Version
	require.NoError(t, json.Unmarshal([]byte(out), &hist))
	require.Len(t, hist, 2)
	require.Equal(t, "import", hist[1].Origin.Via)

	// Delete.
	out, stderr, code = ctl(t, "", "--server", third.URL(), "delete", "demo", "--agent", "helper")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `deleted "demo (agent helper)"`)
	_, _, code = ctl(t, "", "--server", third.URL(), "restore", "demo", "--agent", "helper")
	require.Equal(t, exitNotFound, code)
	_, _, code = ctl(t, "", "--server", third.URL(), "restore", "demo")
	require.Equal(t, 0, code, "the other agent is untouched")

	// Everything at once: sessions already moved elsewhere are skipped, the rest move.
	_, stderr, code = ctl(t, "", "--server", src.URL(), "put", "other", corpusFile, "-n", "team b")
	require.Equal(t, 0, code, stderr)
	out, stderr, code = ctl(t, "", "migrate", "--from", src.URL(), "--to", third.URL(), "-A")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "already moved to "+dst.URL())
	require.Contains(t, out, "migrated 1 session(s)")
	_, stderr, code = ctl(t, "", "migrate", "--from", src.URL(), "--to", third.URL(), "demo")
	require.Equal(t, exitConflict, code, "a session moved elsewhere is moved from there")
	require.Contains(t, stderr, "already moved to "+dst.URL())
	_, _, code = ctl(t, "", "--server", third.URL(), "restore", "other", "-n", "team b")
	require.Equal(t, 0, code)

	// Usage mistakes.
	_, _, code = ctl(t, "", "migrate", "--from", src.URL(), "demo")
	require.Equal(t, exitUsage, code)
	_, _, code = ctl(t, "", "--server", src.URL(), "export", "demo")
	require.Equal(t, exitUsage, code)
	_, _, code = ctl(t, "", "--server", src.URL(), "lease", "release", "demo")
	require.Equal(t, exitUsage, code)
}
