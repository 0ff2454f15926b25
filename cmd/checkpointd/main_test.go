package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// waitHTTP polls url until it answers with want, or fails the test.
func waitHTTP(t *testing.T, url string, want int) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return string(body)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never answered %d", url, want)
	return ""
}

// The exact command line scripts use, as a real process: serve, save, SIGTERM, exit 0, start again
// on the same data directory, and the save is still there.
func TestCheckpointd_ProcessServesAndShutsDownCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := daemonBinary(t)

	dataDir := t.TempDir()
	natsAddr, httpAddr := freeAddr(t), freeAddr(t)
	start := func() (*exec.Cmd, *bytes.Buffer) {
		var logs bytes.Buffer
		cmd := exec.Command(bin, "--data-dir", dataDir, "--nats-listen", natsAddr, "--http-listen", httpAddr)
		cmd.Stderr = &logs
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		waitHTTP(t, "http://"+httpAddr+"/healthz", http.StatusOK)
		return cmd, &logs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cmd, logs := start()
	c, err := checkpoint.Connect("nats://"+natsAddr, nil)
	require.NoError(t, err)
	conv := []byte(`[{"role":"user","content":"survive a restart"}]`)
	_, err = c.Save(ctx, checkpoint.Key{Session: "proc"}, conv)
	require.NoError(t, err)
	c.Close()

	// The daemon publishes a save's result before it counts it: poll.
	require.Eventually(t, func() bool {
		return strings.Contains(waitHTTP(t, "http://"+httpAddr+"/metrics", http.StatusOK), `checkpointd_saves_total{path="request",result="ok"} 1`)
	}, 10*time.Second, 20*time.Millisecond)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "SIGTERM is a clean exit; logs:\n%s", logs)
	require.Contains(t, logs.String(), "checkpointd stopped")

	start()
	c, err = checkpoint.Connect("nats://"+natsAddr, nil)
	require.NoError(t, err)
	defer c.Close()
	got, v, err := c.Restore(ctx, checkpoint.Key{Session: "proc"}, 0)
	require.NoError(t, err)
	require.Equal(t, string(conv), string(got))
	require.Equal(t, uint64(1), v.Version)
}

func TestRun_BadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--replicas", "zero"},
		{"--log-format", "yaml"},
		{"--nats-creds", "x.creds"},
		{"--ingest-memory", "1000"}, // below 1 MiB
		{"--ingest-memory", "-1"},
		{"extra-arg"},
	} {
		var stderr bytes.Buffer
		err := run(context.Background(), args, &stderr)
		require.Error(t, err, "%v", args)
		var ue usageError
		require.ErrorAs(t, err, &ue, "%v: %v", args, err)
	}
}

// --help writes the whole usage where it was asked to go (stdout, from run), and is no error to
// exit on; a mistyped flag is an error that points at --help, with no usage printed.
func TestParseConfig_HelpAndMistakes(t *testing.T) {
	var help bytes.Buffer
	_, err := parseConfig([]string{"--help"}, &help)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, help.String(), "Usage: checkpointd [flags]")
	require.Contains(t, help.String(), "checkpointd healthcheck")
	require.Contains(t, help.String(), "-data-dir")

	help.Reset()
	_, err = parseConfig([]string{"--bogus"}, &help)
	require.ErrorContains(t, err, "flag provided but not defined: -bogus (usage: checkpointd --help)")
	require.False(t, errors.Is(err, flag.ErrHelp))
	require.Empty(t, help.String())
}

func TestRun_EnvironmentSetsFlags(t *testing.T) {
	t.Setenv("CHECKPOINTD_LOG_FORMAT", "json")
	t.Setenv("CHECKPOINTD_REPLICAS", "3")
	cfg, err := parseConfig([]string{"--replicas", "1"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "json", cfg.LogFormat, "the environment sets a flag not on the command line")
	require.Equal(t, 1, cfg.Daemon.Replicas, "the command line wins over the environment")

	t.Setenv("CHECKPOINTD_INGEST_MEMORY", "67108864")
	cfg, err = parseConfig(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, int64(64<<20), cfg.Daemon.IngestBudgetBytes)

	t.Setenv("CHECKPOINTD_MAX_CHECKPOINT_BYTES", "lots")
	_, err = parseConfig(nil, io.Discard)
	require.ErrorContains(t, err, "CHECKPOINTD_MAX_CHECKPOINT_BYTES")
}

func TestRun_HealthzAndMetricsInProcess(t *testing.T) {
	httpAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--http-listen", httpAddr, "--log-format", "json"}, &stderr)
	}()
	require.Equal(t, "ok\n", waitHTTP(t, "http://"+httpAddr+"/healthz", http.StatusOK))
	m := waitHTTP(t, "http://"+httpAddr+"/metrics", http.StatusOK)
	for _, name := range []string{"checkpointd_save_duration_seconds", "go_goroutines", "process_resident_memory_bytes"} {
		require.Contains(t, m, name)
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	require.True(t, strings.Contains(stderr.String(), `"msg":"checkpointd ready"`), stderr.String())
}

// checkpointd --nats-url against an existing 3-node JetStream cluster: two instances started at once
// create the streams and buckets with three replicas between them, and serve the same cluster.
func TestRun_AgainstAClusterIsR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl := testenv.StartCluster(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs [2]syncBuffer
	done := make(chan error, 2)
	for i := range logs {
		go func() {
			done <- run(ctx, []string{"--nats-url", cl.URLs(), "--http-listen", "", "--log-format", "json"}, &logs[i])
		}()
	}
	for i := range logs {
		require.Eventually(t, func() bool {
			select {
			case err := <-done:
				t.Fatalf("checkpointd stopped: %v", err)
			default:
			}
			return strings.Contains(logs[i].String(), `"msg":"checkpointd ready"`)
		}, 60*time.Second, 50*time.Millisecond, "instance %d never became ready", i)
		require.Contains(t, logs[i].String(), `"replicas":3`)
	}
	nc := cl.Conn()
	defer nc.Close()
	c, err := checkpoint.New(nc)
	require.NoError(t, err)
	v, err := c.Save(ctx, checkpoint.Key{Session: "clustered"}, []byte(`[{"role":"user","content":"hi"}]`))
	require.NoError(t, err)
	require.Equal(t, uint64(1), v.Version)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for _, name := range []string{"CP_INGEST", "CP_LOG"} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		require.Equal(t, 3, s.CachedInfo().Config.Replicas, name)
	}
	cancel()
	for range logs {
		require.NoError(t, <-done)
	}
}

// syncBuffer is a bytes.Buffer safe to write from the daemon while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
