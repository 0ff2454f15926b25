package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/buildinfo"
)

// Command-line mistakes exit 2 before anything is sent (no daemon runs here: the port is closed),
// and print the error once with a one-line hint, never the whole help.
func TestCheckpointctl_UsageMistakes(t *testing.T) {
	srv := "--server=nats://127.0.0.1:1"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"mistyped flag", []string{srv, "restore", "demo", "--vew", "1"}, "flag provided but not defined: -vew (usage: checkpointctl restore --help)"},
		{"mistyped global flag", []string{"--sever", "x", "list"}, "(usage: checkpointctl --help)"},
		{"unknown view", []string{srv, "restore", "demo", "--view", "reqest"}, `--view "reqest": want full or request`},
		{"max-messages below 2", []string{srv, "restore", "demo", "--max-messages", "1"}, "--max-messages 1: the minimum is 2"},
		{"negative max-messages", []string{srv, "restore", "demo", "--max-messages", "-4"}, "the minimum is 2"},
		{"negative keep-last", []string{srv, "prune", "demo", "--keep-last", "-1"}, "--keep-last -1"},
		{"negative max-age", []string{srv, "prune", "--max-age", "-1h"}, "--max-age -1h0m0s"},
		{"missing file to put", []string{srv, "put", "demo", "no-such-file.json"}, "no-such-file.json: no such file"},
		{"missing bundle to import", []string{srv, "import", "no-such.cpbundle"}, "no-such.cpbundle: no such file"},
		{"help of an unknown command", []string{"help", "nope"}, `unknown command "nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := ctl(t, "", tc.args...)
			require.Equal(t, exitUsage, code, stderr)
			require.Empty(t, out)
			require.Contains(t, stderr, tc.want)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line, printed once: %q", stderr)
		})
	}
}

func TestCheckpointctl_Help(t *testing.T) {
	out, stderr, code := ctl(t, "", "help")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "Commands:")
	require.Contains(t, out, "Exit codes:")

	out, stderr, code = ctl(t, "", "help", "restore")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "Usage: checkpointctl restore SESSION")
	require.Contains(t, out, "-max-messages")

	// --help still prints the whole usage, as asked, to stdout as help does (so that it can be
	// paged), and nothing to stderr.
	out, stderr, code = ctl(t, "", "restore", "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "-max-messages")
	require.Contains(t, out, "Exit codes:")
	require.Empty(t, stderr)
	out, stderr, code = ctl(t, "", "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "Commands:")
	require.Contains(t, out, "-server")
	require.Empty(t, stderr)
}

func TestCheckpointctl_Version(t *testing.T) {
	out, stderr, code := ctl(t, "", "version")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "checkpointctl "+buildinfo.Get().String()+"\n", out)

	out, stderr, code = ctl(t, "", "version", "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	var got buildinfo.Info
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, buildinfo.Get(), got)
}
