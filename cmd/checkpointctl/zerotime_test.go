package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/testenv"
)

// No JSON output carries a zero time ("0001-01-01T00:00:00Z"): a time that is not known is left out.
func TestCheckpointctl_JSONHasNoZeroTimes(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()
	_, stderr, code := ctl(t, "", srv, "put", "never-leased", corpusFile)
	require.Equal(t, 0, code, stderr)
	_, stderr, code = ctl(t, "", srv, "fork", "never-leased", "forked")
	require.Equal(t, 0, code, stderr)

	for _, args := range [][]string{
		{"list"}, {"show", "never-leased"}, {"show", "forked"}, {"history", "never-leased"},
		{"lease", "status", "never-leased"}, {"lease", "status", "nobody-yet"},
	} {
		out, stderr, code := ctl(t, "", append(append([]string{srv}, args...), "-o", "json")...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
		require.NotContains(t, out, "0001-01-01", "%v", args)
	}
	out, _, _ := ctl(t, "", srv, "lease", "status", "never-leased", "-o", "json")
	require.NotContains(t, out, `"acquired"`)
}
