package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
)

// A second checkpointd on the data directory of a running one (other ports) exits non-zero within
// seconds, naming the directory and the process holding it; the first keeps serving. Both are real
// processes, as users run them.
func TestCheckpointd_SecondDaemonOnOneDataDirRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, dataDir := daemonBinary(t), t.TempDir()
	natsAddr, httpAddr := freeAddr(t), freeAddr(t)
	first := exec.Command(bin, "--data-dir", dataDir, "--nats-listen", natsAddr, "--http-listen", httpAddr)
	var firstLogs syncBuffer
	first.Stderr = &firstLogs
	require.NoError(t, first.Start())
	t.Cleanup(func() { _ = first.Process.Kill(); _ = first.Wait() })
	waitHTTP(t, "http://"+httpAddr+"/healthz", http.StatusOK)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := checkpoint.Connect("nats://"+natsAddr, nil)
	require.NoError(t, err)
	defer c.Close()
	before := []byte(`[{"role":"user","content":"saved before the second daemon"}]`)
	_, err = c.Save(ctx, checkpoint.Key{Session: "first"}, before)
	require.NoError(t, err)

	second := exec.Command(bin, "--data-dir", dataDir, "--nats-listen", freeAddr(t), "--http-listen", freeAddr(t))
	var secondLogs bytes.Buffer
	second.Stderr = &secondLogs
	require.NoError(t, second.Start())
	exited := make(chan error, 1)
	go func() { exited <- second.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(10 * time.Second):
		_ = second.Process.Kill()
		t.Fatalf("a second checkpointd on the same --data-dir is still running after 10 s; logs:\n%s", secondLogs.String())
	}
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit) && exit.ExitCode() != 0, "exit: %v; logs:\n%s", err, secondLogs.String())
	msg := secondLogs.String()
	require.Contains(t, msg, "--data-dir "+dataDir+" is in use by checkpointd pid "+strconv.Itoa(first.Process.Pid))
	host, _ := os.Hostname()
	require.Contains(t, msg, "on host "+host+", running since ")
	require.Contains(t, msg, "stop it, or pass another --data-dir")

	// The first one still serves what it had, and new saves.
	got, _, err := c.Restore(ctx, checkpoint.Key{Session: "first"}, 0)
	require.NoError(t, err)
	require.Equal(t, string(before), string(got))
	after := []byte(`[{"role":"user","content":"saved after"}]`)
	v, err := c.Save(ctx, checkpoint.Key{Session: "second"}, after)
	require.NoError(t, err)
	require.Equal(t, uint64(1), v.Version)
	got, _, err = c.Restore(ctx, checkpoint.Key{Session: "second"}, 0)
	require.NoError(t, err)
	require.Equal(t, string(after), string(got))
	require.NotContains(t, firstLogs.String(), "level=ERROR")
}

// The lock belongs to the open lock file: a second take fails, naming this process, until the
// first is released; the kernel, not the file's presence, decides.
func TestLockDataDir_HeldUntilReleased(t *testing.T) {
	dir := t.TempDir()
	lock, err := lockDataDir(dir)
	require.NoError(t, err)

	_, err = lockDataDir(dir)
	var inUse *DataDirInUseError
	require.ErrorAs(t, err, &inUse)
	require.Equal(t, os.Getpid(), inUse.Holder.PID)
	require.WithinDuration(t, time.Now(), inUse.Holder.Since, time.Minute)

	lock.release()
	again, err := lockDataDir(dir)
	require.NoError(t, err, "released: the lock file left behind is no stale lock")
	again.release()
}

// A data directory checkpointd cannot write is reported at once, naming it, before any server
// starts; so is a port another process already listens on (it used to take 10 s and say only
// that the embedded server "did not become ready").
func TestRun_EmbeddedServerCannotStartSaysWhy(t *testing.T) {
	t.Run("data dir not writable", func(t *testing.T) {
		dir := t.TempDir()
		if os.Geteuid() == 0 {
			// Permissions do not stop root (CI runs as root); sysfs refuses to create files to anyone.
			dir = "/sys/kernel"
			if _, err := os.Stat(dir); err != nil {
				t.Skip("no /sys/kernel to stand for an unwritable directory")
			}
		} else {
			require.NoError(t, os.Chmod(dir, 0o500))
		}
		err := run(context.Background(), []string{"--data-dir", dir, "--nats-listen", "127.0.0.1:0", "--http-listen", ""}, &bytes.Buffer{})
		require.ErrorContains(t, err, "--data-dir "+dir+": cannot write there")
		require.ErrorContains(t, err, "permission denied")
	})
	t.Run("port taken", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		start := time.Now()
		err = run(context.Background(), []string{"--data-dir", t.TempDir(), "--nats-listen", l.Addr().String(), "--http-listen", ""}, &bytes.Buffer{})
		require.ErrorContains(t, err, "address already in use")
		require.ErrorContains(t, err, l.Addr().String())
		require.Less(t, time.Since(start), 5*time.Second, "said at once, not after the readiness timeout")
	})
}
