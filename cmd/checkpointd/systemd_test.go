package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// unitFile is deploy/systemd/checkpointd.service as section -> key -> values (a key may repeat).
type unitFile map[string]map[string][]string

func readUnit(t *testing.T, path string) unitFile {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "not key=value: %q", line)
			require.NotEmpty(t, section, "%q outside a section", line)
			u[section][k] = append(u[section][k], v)
		}
	}
	require.NoError(t, sc.Err())
	return u
}

func (u unitFile) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	require.Len(t, v, 1, "[%s] %s=", section, key)
	return v[0]
}

// TestSystemdUnit_Essentials checks the example unit: not root, a state directory as --data-dir,
// the settings file as --config (and that file parses), reload by SIGHUP, restart on failure, time
// for the graceful shutdown, the hardening options; and `systemd-analyze verify` where it exists.
func TestSystemdUnit_Essentials(t *testing.T) {
	const unitPath = "../../deploy/systemd/checkpointd.service"
	u := readUnit(t, unitPath)
	svc := "Service"
	require.NotEqual(t, "root", u.one(t, svc, "User"))
	require.Equal(t, "checkpointd", u.one(t, svc, "StateDirectory"))
	require.Equal(t, "on-failure", u.one(t, svc, "Restart"))
	require.Equal(t, "/bin/kill -HUP $MAINPID", u.one(t, svc, "ExecReload"))
	stop, err := time.ParseDuration(u.one(t, svc, "TimeoutStopSec"))
	require.NoError(t, err)
	require.Greater(t, stop, 30*time.Second, "TimeoutStopSec must outlast the default --shutdown-timeout")
	for key, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"PrivateDevices": "yes", "CapabilityBoundingSet": "", "RestrictSUIDSGID": "yes",
	} {
		require.Equal(t, want, u.one(t, svc, key), "hardening: %s", key)
	}
	require.Equal(t, "multi-user.target", u.one(t, "Install", "WantedBy"))

	// ExecStart: checkpointd with flags it knows, the data in the state directory.
	argv := strings.Fields(u.one(t, svc, "ExecStart"))
	require.Equal(t, "/usr/local/bin/checkpointd", argv[0])
	require.Contains(t, argv, "--data-dir")
	require.Equal(t, "${STATE_DIRECTORY}", argv[indexOf(argv, "--data-dir")+1])
	require.Contains(t, argv, "--config")
	require.Equal(t, "${CONFIGURATION_DIRECTORY}/checkpointd.env", argv[indexOf(argv, "--config")+1])

	// The settings file the unit names parses as checkpointd reads it.
	dir := t.TempDir()
	_, err = parseConfig([]string{"--data-dir", dir, "--config", "../../deploy/systemd/checkpointd.env"}, io.Discard)
	require.NoError(t, err)

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: the unit's syntax was checked by this test only")
		return
	}
	// verify wants ExecStart's binary to exist: point it at the one built from this package.
	data, err := os.ReadFile(unitPath)
	require.NoError(t, err)
	unit := filepath.Join(dir, "checkpointd.service")
	require.NoError(t, os.WriteFile(unit, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/checkpointd", daemonBinary(t))), 0o644))
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	require.NoError(t, err, "systemd-analyze verify: %s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify warns")
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
