package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/testenv"
)

// import cannot know how many sessions a bundle holds before its end: its progress counts them,
// never showing a full "0/0 sessions" bar from the first frame.
func TestCheckpointctl_ImportProgress(t *testing.T) {
	src, dst := testenv.Start(t), testenv.Start(t)
	for _, s := range []string{"one", "two"} {
		_, stderr, code := ctl(t, "", "--server", src.URL(), "put", s, corpusFile)
		require.Equal(t, 0, code, stderr)
	}
	bundle := filepath.Join(t.TempDir(), "all.cpbundle")
	_, stderr, code := ctl(t, "", "--server", src.URL(), "export", "--all", "--file", bundle)
	require.Equal(t, 0, code, stderr)

	out, stderr, code := ctl(t, "", "--server", dst.URL(), "import", bundle, "--progress", "always")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "imported 2 of 2 version(s) in 2 session(s)")
	require.Contains(t, stderr, "\rimport 1 sessions  1 versions", "the first frame counts what is imported")
	require.Contains(t, stderr, "\rimport 2 sessions  2 versions", "the last frame shows the totals")
	require.NotContains(t, stderr, "0/0")
	require.NotContains(t, stderr, "[=")
}
