package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// TestSIGHUP_ReloadsWithExternalNATS runs checkpointd as a process against an external NATS server
// (--nats-url) with a --config file, and sends it SIGHUP: it must survive (it used to die, as
// SIGHUP was caught only with the embedded server), apply the new log level and retention policy
// from the file, and keep the running settings when the file is broken.
func TestSIGHUP_ReloadsWithExternalNATS(t *testing.T) {
	listen := freeAddrTB(t)
	ns, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: listen})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })

	conf := filepath.Join(t.TempDir(), "checkpointd.env")
	write := func(s string) { require.NoError(t, os.WriteFile(conf, []byte(s), 0o600)) }
	write("# as at start\nCHECKPOINTD_LOG_LEVEL=info\n")
	httpAddr := freeAddrTB(t)
	cmd := exec.Command(daemonBinary(t), "--nats-url", "nats://"+listen, "--http-listen", httpAddr, "--config", conf)
	var logs bytes.Buffer
	cmd.Stderr = &lockedWriter{w: &logs}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); <-exited })
	logText := func() string { return logs.String() }
	require.Eventually(t, func() bool { return healthy(httpAddr) }, 30*time.Second, 20*time.Millisecond, "never healthy: %s", logText())

	nc, err := nats.Connect("nats://" + listen)
	require.NoError(t, err)
	defer nc.Close()
	prune := func() string { // a prune without limits: accepted only if retention is configured
		msg, err := nc.Request("cp.api.default.prune", []byte(`{"dryRun": true}`), 5*time.Second)
		require.NoError(t, err)
		return string(msg.Data) + " " + msg.Header.Get("Cp-Error")
	}
	require.Contains(t, prune(), "none configured")

	hup := func(wantLog string) {
		t.Helper()
		before := len(logText())
		require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
		require.Eventually(t, func() bool { return strings.Contains(logText()[before:], wantLog) }, 10*time.Second, 20*time.Millisecond,
			"no %q after SIGHUP: %s", wantLog, logText())
		select {
		case <-exited:
			t.Fatalf("SIGHUP killed the daemon: %v\n%s", cmd.ProcessState, logText())
		default:
		}
		require.True(t, healthy(httpAddr))
	}
	hup("reload done")
	require.NotContains(t, logText(), "level=DEBUG")

	write("CHECKPOINTD_LOG_LEVEL=debug\nCHECKPOINTD_RETENTION_KEEP_LAST=1\n")
	hup("log level changed")
	require.NotContains(t, prune(), "none configured", "the retention policy was not reloaded")
	require.Eventually(t, func() bool { return strings.Contains(logText(), "level=DEBUG") }, 10*time.Second, 20*time.Millisecond,
		"no debug line after raising the level: %s", logText())

	write("CHECKPOINTD_LOG_LEVEL=loud\n")
	hup("settings not reloaded")
	require.Contains(t, logText(), `\"loud\" is not debug`)
	require.NotContains(t, prune(), "none configured", "a broken file changed the policy in force")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
		require.True(t, cmd.ProcessState.Success(), "%v\n%s", cmd.ProcessState, logText())
	case <-time.After(30 * time.Second):
		t.Fatal("no exit on SIGTERM")
	}
}

// TestConfigFile_Precedence: the command line wins over --config, which wins over the environment;
// unknown names and bad values are errors naming the file and line.
func TestConfigFile_Precedence(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "c.env")
	require.NoError(t, os.WriteFile(conf, []byte("# comment\n\nCHECKPOINTD_LOG_LEVEL=\"warn\"\nCHECKPOINTD_RETENTION_KEEP_LAST=7\nCHECKPOINTD_LOG_FORMAT=json\n"), 0o600))
	t.Setenv("CHECKPOINTD_RETENTION_KEEP_LAST", "3")
	t.Setenv("CHECKPOINTD_SHUTDOWN_TIMEOUT", "5s")
	c, err := parseConfig([]string{"--config", conf, "--log-format", "text"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "warn", c.LogLevel)
	require.Equal(t, 7, c.Daemon.Retention.Default.KeepLast, "the file wins over the environment")
	require.Equal(t, "text", c.LogFormat, "the command line wins over the file")
	require.Equal(t, 5*time.Second, c.ShutdownTimeout, "the environment still applies to what the file leaves out")

	for body, want := range map[string]string{
		"CHECKPOINTD_NOPE=1\n":                       "c.env:1: CHECKPOINTD_NOPE is not a checkpointd setting",
		"\nLOG_LEVEL=debug\n":                        "c.env:2: want CHECKPOINTD_<FLAG>=VALUE",
		"CHECKPOINTD_RETENTION_KEEP_LAST=many\n":     "c.env:1: CHECKPOINTD_RETENTION_KEEP_LAST: parse error",
		"CHECKPOINTD_CONFIG=/etc/other\n":            "c.env:1: a config file cannot name another",
		"CHECKPOINTD_LOG_LEVEL=debug\nCHECKPOINTD_X": "c.env:2",
	} {
		require.NoError(t, os.WriteFile(conf, []byte(body), 0o600))
		_, err := parseConfig([]string{"--config", conf}, io.Discard)
		require.ErrorContains(t, err, want, body)
	}
	_, err = parseConfig([]string{"--config", filepath.Join(dir, "missing")}, io.Discard)
	require.ErrorContains(t, err, "--config")
	require.False(t, errorsIsHelp(err))
}

func errorsIsHelp(err error) bool { return err == flag.ErrHelp }

// On SIGHUP the daemon re-reads --namespace-keys: a file that leaves a key out is applied and the
// dropped key's id is logged as a warning; a broken file changes nothing.
func TestSIGHUP_ReloadsNamespaceKeys(t *testing.T) {
	newKey := func() string {
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		return base64.StdEncoding.EncodeToString(k)
	}
	k1, k2 := newKey(), newKey()
	keys := filepath.Join(t.TempDir(), "keys.json")
	write := func(s string) { require.NoError(t, os.WriteFile(keys, []byte(s), 0o600)) }
	write(`{"*": "` + k1 + `"}`)
	httpAddr := freeAddrTB(t)
	cmd := exec.Command(daemonBinary(t), "--data-dir", t.TempDir(), "--nats-listen", freeAddrTB(t), "--http-listen", httpAddr,
		"--namespace-keys", keys)
	var logs bytes.Buffer
	cmd.Stderr = &lockedWriter{w: &logs}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); <-exited })
	require.Eventually(t, func() bool { return healthy(httpAddr) }, 30*time.Second, 20*time.Millisecond, "never healthy: %s", logs.String())

	hup := func(wantLog string) string {
		t.Helper()
		before := len(logs.String())
		require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
		require.Eventually(t, func() bool { return strings.Contains(logs.String()[before:], wantLog) }, 10*time.Second, 20*time.Millisecond,
			"no %q after SIGHUP: %s", wantLog, logs.String())
		return logs.String()[before:]
	}
	write(`{"*": "` + k2 + `"}`)
	after := hup("reload done")
	require.Contains(t, after, "keys no longer in --namespace-keys")
	require.Contains(t, after, "namespace keys in force")
	require.NotContains(t, after, k1, "a log line shows a key")

	write(`{"*": "not base64"}`)
	after = hup("settings not reloaded")
	require.NotContains(t, after, "namespace keys in force")
	require.True(t, healthy(httpAddr))
}
