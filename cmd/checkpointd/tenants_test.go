package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

var (
	ctlBuild sync.Once
	ctlPath  string
	ctlErr   error
)

// ctlBinary builds checkpointctl (once) into the directory of the checkpointd binary.
func ctlBinary(t *testing.T) string {
	t.Helper()
	daemonBinary(t)
	ctlBuild.Do(func() {
		ctlPath = filepath.Join(binDir, "checkpointctl")
		out, err := exec.Command("go", "build", "-o", ctlPath, "../checkpointctl").CombinedOutput()
		if err != nil {
			ctlErr = &buildFailure{err: err, out: string(out)}
		}
	})
	require.NoError(t, ctlErr)
	return ctlPath
}

// readmeTenants is the tenants file of README.md, "Running it for several teams".
const readmeTenants = `{"admins":  [{"user": "ops", "password": "change-me-ops"}],
 "tenants": [{"namespace": "alice", "user": "alice", "password": "change-me-alice"},
             {"namespace": "bob",   "user": "bob",   "password": "change-me-bob"}]}
`

// The README's section "Running it for several teams", step by step with the built binaries: start
// the daemon with a tenants file, save and restore as one tenant, see another tenant and anonymous
// clients refused, let an operator list everything, add a login with SIGHUP (an nkey), survive a
// broken file on SIGHUP, print the accounts for an external cluster; and no password or seed ever
// reaches the log, at debug level.
func TestReadme_RunningItForSeveralTeams(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	bin, ctl := daemonBinary(t), ctlBinary(t)
	dir := t.TempDir()
	tenants := filepath.Join(dir, "tenants.json")
	require.NoError(t, os.WriteFile(tenants, []byte(readmeTenants), 0o600))
	natsAddr, httpAddr := freeAddr(t), freeAddr(t)

	// go run ./cmd/checkpointd --tenants tenants.json --data-dir /tmp/cp-teams
	var logs bytes.Buffer
	daemon := exec.Command(bin, "--tenants", tenants, "--data-dir", filepath.Join(dir, "cp-teams"),
		"--nats-listen", natsAddr, "--http-listen", httpAddr, "--log-level", "debug")
	daemon.Stderr = &lockedWriter{w: &logs}
	require.NoError(t, daemon.Start())
	t.Cleanup(func() { _ = daemon.Process.Kill() })
	waitHTTP(t, "http://"+httpAddr+"/healthz", http.StatusOK)
	logText := func() string { return (&lockedWriter{w: &logs}).String() }

	as := func(login string) string {
		if login == "" {
			return "nats://" + natsAddr
		}
		return "nats://" + login + "@" + natsAddr
	}
	run := func(server string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(ctl, args...)
		cmd.Dir = "../.." // the repository, for testdata/
		cmd.Env = append(os.Environ(), "CHECKPOINTCTL_SERVER="+server)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return stdout.String(), stderr.String(), ee.ExitCode()
		}
		require.NoError(t, err)
		return stdout.String(), stderr.String(), 0
	}
	alice := as("alice:change-me-alice")

	// alice saves and restores her sessions
	_, stderr, code := run(alice, "put", "-n", "alice", "demo", "testdata/corpus/openhands_gui_todo_app.json")
	require.Equal(t, 0, code, stderr)
	restored, stderr, code := run(alice, "restore", "-n", "alice", "demo")
	require.Equal(t, 0, code, stderr)
	saved, err := os.ReadFile("../../testdata/corpus/openhands_gui_todo_app.json")
	require.NoError(t, err)
	require.JSONEq(t, string(saved), restored)

	// bob cannot reach them (exit 6: nobody answers him there), nor can anyone without a login
	_, stderr, code = run(as("bob:change-me-bob"), "restore", "-n", "alice", "demo")
	require.Equal(t, 6, code, stderr)
	require.Contains(t, stderr, "a login reaches only its own namespace")
	_, stderr, code = run(as(""), "list", "-n", "alice")
	require.Equal(t, 6, code, stderr)
	require.Contains(t, stderr, "Authorization Violation")
	_, stderr, code = run(as("alice:wrong"), "list", "-n", "alice")
	require.Equal(t, 6, code, stderr)

	// operators see every namespace
	out, stderr, code := run(as("ops:change-me-ops"), "list", "-A")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "demo")

	// a new login, with an nkey, without a restart: edit the file, SIGHUP
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(dir, "carol.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	withCarol := strings.Replace(readmeTenants, `]}`, `,
             {"namespace": "carol", "nkey": "`+pub+`"}]}`, 1)
	require.NoError(t, os.WriteFile(tenants, []byte(withCarol), 0o600))
	require.NoError(t, daemon.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(logText(), "tenants file reloaded") }, 10*time.Second, 20*time.Millisecond)
	_, stderr, code = run(as(""), "--nkey", seedFile, "put", "-n", "carol", "notes", "testdata/corpus/openhands_gui_todo_app.json")
	require.Equal(t, 0, code, stderr)

	// a broken file is refused with an error in the log, and the logins in force stay
	require.NoError(t, os.WriteFile(tenants, []byte(`{"tenants": [{"namespace": "x", "user": "x", "pasword": "oops"}]}`), 0o600))
	require.NoError(t, daemon.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(logText(), "tenants file not reloaded") }, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, logText(), `unknown field \"pasword\"`)
	_, stderr, code = run(as(""), "--nkey", seedFile, "list", "-n", "carol")
	require.Equal(t, 0, code, stderr)
	_, stderr, code = run(alice, "list", "-n", "alice")
	require.Equal(t, 0, code, stderr)

	// the accounts for an external cluster, loaded by nats-server as a configuration file
	require.NoError(t, os.WriteFile(tenants, []byte(withCarol), 0o600))
	printed, err := exec.Command(bin, "--print-nats-config", "--tenants", tenants).Output()
	require.NoError(t, err)
	t.Setenv(embedded.DaemonPasswordVar, "daemon-secret")
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, append([]byte("listen: 127.0.0.1:-1\njetstream {store_dir: \""+dir+"/js\"}\n"), printed...), 0o600))
	opts, err := server.ProcessConfigFile(conf)
	require.NoError(t, err)
	require.Len(t, opts.Users, 4, "the daemon, ops, alice and bob") // carol logs in by nkey
	require.Len(t, opts.Nkeys, 1)

	require.NoError(t, daemon.Process.Signal(syscall.SIGTERM))
	require.NoError(t, daemon.Wait())
	for _, secret := range []string{"change-me-ops", "change-me-alice", "change-me-bob", string(seed), "oops"} {
		require.NotContains(t, logText(), secret)
	}
	require.Contains(t, logText(), "logins required")
	require.NotContains(t, logText(), "server is open")
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

// Without --tenants the embedded server is open, as before, and the log says so and how to close it.
func TestRun_OpenServerSaysSo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--http-listen", ""}, &stderr)
	}()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "checkpointd ready") }, 20*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Contains(t, stderr.String(), "level=WARN msg=\"the embedded NATS server is open: anyone who can reach 127.0.0.1:0 can read and write every namespace; run with --tenants FILE")
}

func TestRun_TenantsFlags(t *testing.T) {
	for _, c := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"--print-nats-config"}, true, "--print-nats-config: needs --tenants FILE"},
		{[]string{"--tenants", "t.json", "--nats-url", "nats://x:4222"}, true, "configures the embedded NATS server"},
		{[]string{"--tenants", filepath.Join(t.TempDir(), "missing.json"), "--data-dir", t.TempDir(), "--http-listen", ""}, false, "missing.json"},
		{[]string{"--print-nats-config", "--tenants", filepath.Join(t.TempDir(), "missing.json")}, false, "no such file"},
	} {
		err := run(context.Background(), c.args, &bytes.Buffer{})
		require.ErrorContains(t, err, c.want, "%v", c.args)
		var ue usageError
		require.Equal(t, c.usage, errors.As(err, &ue), "%v: %v", c.args, err)
	}
}
