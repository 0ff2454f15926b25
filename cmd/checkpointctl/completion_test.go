package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each script names every command and every flag of every command (read from the commands
// themselves), and its shell reads it without a syntax error (zsh and fish: where installed).
func TestCheckpointctl_Completion(t *testing.T) {
	spec := completionSpec()
	for _, c := range spec.commands {
		if c.name != "help" && c.name != "completion" {
			require.NotEmpty(t, c.flags, "command %s: no flags read", c.name)
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			script, stderr, code := ctl(t, "", "completion", shell)
			require.Equal(t, 0, code, stderr)
			for _, name := range commandNames() {
				require.Contains(t, script, name)
			}
			for _, c := range spec.commands {
				for _, f := range c.flags {
					want := f.spelled()
					if shell == "fish" {
						want = map[bool]string{true: "-s '", false: "-l '"}[len(f.name) == 1] + f.name + "'"
					}
					require.Contains(t, script, want, "%s: flag %s of %s", shell, f.name, c.name)
				}
			}
			path, err := exec.LookPath(shell)
			if err != nil {
				t.Skipf("%s is not installed: syntax not checked", shell)
			}
			file := filepath.Join(t.TempDir(), "checkpointctl."+shell)
			require.NoError(t, os.WriteFile(file, []byte(script), 0o600))
			out, err := exec.Command(path, "-n", file).CombinedOutput()
			require.NoError(t, err, "%s -n: %s", shell, out)
		})
	}
}

// The bash script completes what a person types: the command after a global flag's value, a
// command's words and its flags.
func TestCheckpointctl_CompletionBash(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	script, _, code := ctl(t, "", "completion", "bash")
	require.Equal(t, 0, code)
	file := filepath.Join(t.TempDir(), "checkpointctl.bash")
	require.NoError(t, os.WriteFile(file, []byte(script), 0o600))
	complete := func(words ...string) string {
		t.Helper()
		prog := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _checkpointctl; echo "${COMPREPLY[*]}"`
		out, err := exec.Command("bash", append([]string{"-c", prog, "bash", file, "checkpointctl"}, words...)...).CombinedOutput()
		require.NoError(t, err, string(out))
		return strings.TrimSpace(string(out))
	}
	require.Equal(t, "watch", complete("--server", "nats://h:4222", "wat"))
	require.Equal(t, "acquire", complete("lease", "ac"))
	require.Equal(t, "bash", complete("completion", "ba"))
	require.Equal(t, "--namespace", complete("watch", "--"))
	require.Equal(t, "--keep-last", complete("--timeout", "5s", "--tls-ca=ca.pem", "prune", "--keep"))
}
