package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// These tests run checkpointd against an old nats-server release as a real process: Debian's
// package (2.9.10 in Debian 12). The server's version decides what checkpointd must do: refuse a
// cluster older than 2.11.0 (see internal/transfer/serverversion.go), work on a single server
// from 2.9.10 on.

// oldNATS is a nats-server binary from the system, not the one compiled into checkpointd.
type oldNATS struct {
	bin, version string // version as the server reports it, without "v"
}

// systemNATS finds the nats-server binary on PATH (or where Debian installs it), or skips.
func systemNATS(t *testing.T) oldNATS {
	t.Helper()
	if testing.Short() {
		t.Skip("runs nats-server processes")
	}
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nats-server"); serr != nil {
			t.Skip("no nats-server binary on PATH: install Debian's package (apt-get install nats-server) " +
				"to test checkpointd against an old NATS release")
		}
		bin = "/usr/sbin/nats-server"
	}
	out, err := exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	// "nats-server: v2.9.10"
	_, v, ok := strings.Cut(strings.TrimSpace(string(out)), ": v")
	require.True(t, ok, "nats-server --version printed %q", out)
	return oldNATS{bin: bin, version: v}
}

// olderThan reports whether the binary's release is older than major.minor.
func (o oldNATS) olderThan(major, minor int) bool {
	var ma, mi, pa int
	_, err := fmt.Sscanf(o.version, "%d.%d.%d", &ma, &mi, &pa)
	return err == nil && (ma < major || ma == major && mi < minor)
}

// startOldNATS runs n nats-server processes with JetStream, each from its own config file, temp
// store and random loopback ports; with n > 1 they form a cluster named "old". It returns their
// client URLs once JetStream answers (with a meta leader elected, in a cluster).
func startOldNATS(t *testing.T, o oldNATS, n int) []string {
	t.Helper()
	clients := make([]string, n)
	for i := range clients {
		clients[i] = freeAddr(t)
	}
	urls := startOldServers(t, o, clients, n > 1)
	waitJetStream(t, urls[0])
	return urls
}

// startOldServers runs a nats-server process listening on each of clients, routed together into a
// cluster named "old" if clustered, and returns their URLs without waiting for JetStream.
func startOldServers(t *testing.T, o oldNATS, clients []string, clustered bool) []string {
	t.Helper()
	routes := make([]string, len(clients))
	for i := range routes {
		routes[i] = freeAddr(t)
	}
	var urls []string
	for i := range clients {
		dir := t.TempDir()
		conf := fmt.Sprintf("server_name: old%d\nlisten: %q\njetstream { store_dir: %q }\n", i+1, clients[i], filepath.Join(dir, "js"))
		if clustered {
			var rs []string
			for _, r := range routes {
				rs = append(rs, fmt.Sprintf("%q", "nats-route://"+r))
			}
			conf += fmt.Sprintf("cluster { name: old, listen: %q, routes: [%s] }\n", routes[i], strings.Join(rs, ", "))
		}
		path := filepath.Join(dir, "nats.conf")
		require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
		cmd := exec.Command(o.bin, "-c", path)
		var logs syncBuffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("nats-server old%d:\n%s", i+1, logs.String())
			}
		})
		urls = append(urls, "nats://"+clients[i])
	}
	return urls
}

// waitJetStream waits until JetStream answers an account info request at url.
func waitJetStream(t *testing.T, url string) {
	t.Helper()
	require.Eventually(t, func() bool {
		nc, err := nats.Connect(url)
		if err != nil {
			return false
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "JetStream at %s never answered", url)
}

// A cluster of nats-server releases older than 2.11.0 can acknowledge two saves expecting the same
// head: checkpointd refuses it, at start with an error naming the version found, the minimum and
// why, and when NATS reconnects it to such a server later (a cluster of mixed versions).
func TestOldNATS_ClusterIsRefused(t *testing.T) {
	o := systemNATS(t)
	if !o.olderThan(2, 11) {
		t.Skipf("nats-server %s is not older than 2.11.0: nothing to refuse", o.version)
	}
	urls := startOldNATS(t, o, 3)

	t.Run("at start", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var logs syncBuffer
		err := run(ctx, []string{"--nats-url", strings.Join(urls, ","), "--http-listen", ""}, &logs)
		var refused *transfer.ServerVersionError
		require.ErrorAs(t, err, &refused, "logs:\n%s", logs.String())
		require.ErrorContains(t, err, "nats-server "+o.version+" (the connected server old")
		require.ErrorContains(t, err, `in cluster "old") is older than 2.11.0`)
		require.ErrorContains(t, err, "Nats-Expected-Last-Subject-Sequence")
		require.ErrorContains(t, err, "#4320, #6194, #6485")
		require.NotContains(t, logs.String(), "checkpointd ready")
	})

	t.Run("after a reconnect", func(t *testing.T) {
		// The daemon starts on a current server (the embedded one), which then goes away; its
		// connection's only other server is a node of the old cluster.
		ns, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
		require.NoError(t, err)
		defer ns.Shutdown()
		nc, err := nats.Connect(ns.ClientURL()+","+urls[0], nats.DontRandomize(), nats.MaxReconnects(-1),
			nats.ReconnectWait(50*time.Millisecond))
		require.NoError(t, err)
		defer nc.Close()
		var logs syncBuffer
		cfg := transfer.DefaultConfig()
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		cfg.Metrics = metrics.New(prometheus.NewRegistry())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d, err := transfer.Open(ctx, nc, cfg)
		require.NoError(t, err)
		defer func() { _ = d.Close(ctx) }()
		require.True(t, d.Ready())

		ns.Shutdown()
		select {
		case err = <-d.ServerRefused():
		case <-time.After(20 * time.Second):
			t.Fatalf("reconnected to %s (now on %q) and not refused; logs:\n%s", urls[0], nc.ConnectedUrl(), logs.String())
		}
		require.ErrorContains(t, err, "nats-server "+o.version+" (the connected server old1")
		require.ErrorContains(t, err, "is older than 2.11.0")
		require.False(t, d.Ready(), "/healthz reports the daemon unhealthy")
		require.Contains(t, logs.String(), "checkpointd must not run against")
	})

	t.Run("checkpointd exits", func(t *testing.T) {
		// The second URL has no server yet, so checkpointd connects to the first (embedded, current);
		// once that is gone, NATS reconnects it to an old clustered server started on the second.
		ns, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
		require.NoError(t, err)
		defer ns.Shutdown()
		later := freeAddr(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var logs syncBuffer
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, []string{"--nats-url", ns.ClientURL() + ",nats://" + later, "--http-listen", ""}, &logs)
		}()
		require.Eventually(t, func() bool { return strings.Contains(logs.String(), "checkpointd ready") }, 30*time.Second, 20*time.Millisecond)
		ns.Shutdown()
		startOldServers(t, o, []string{later}, true)
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("checkpointd still runs after NATS reconnected it to an old cluster; logs:\n%s", logs.String())
		}
		var refused *transfer.ServerVersionError
		require.ErrorAs(t, err, &refused, "logs:\n%s", logs.String())
		require.ErrorContains(t, err, "nats-server "+o.version+" (the connected server old1")
	})
}

// A single nats-server from 2.9.10 on serves everything checkpointd does: whole and appended
// saves, a chunked one past max_payload, restore, list, history, leases, fork, prune, delete, and a
// daemon restart.
func TestOldNATS_SingleServerWorks(t *testing.T) {
	o := systemNATS(t)
	if o.olderThan(2, 9) || o.version == "2.9.0" {
		t.Skipf("nats-server %s is older than checkpointd's minimum for a single server", o.version)
	}
	url := startOldNATS(t, o, 1)[0]
	startDaemon := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		var logs syncBuffer
		go func() {
			done <- run(ctx, []string{"--nats-url", url, "--http-listen", "", "--log-format", "json"}, &logs)
		}()
		require.Eventually(t, func() bool {
			select {
			case err := <-done:
				t.Fatalf("checkpointd stopped: %v; logs:\n%s", err, logs.String())
			default:
			}
			return strings.Contains(logs.String(), `"msg":"checkpointd ready"`)
		}, 30*time.Second, 20*time.Millisecond)
		return func() {
			cancel()
			require.NoError(t, <-done)
			require.NotContains(t, logs.String(), `"level":"ERROR"`)
		}
	}
	stop := startDaemon()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := checkpoint.Connect(url, nil)
	require.NoError(t, err)
	defer c.Close()
	key := checkpoint.Key{Namespace: "old", Session: "s"}

	conv := []byte(`[{"role":"user","content":"hello"}]`)
	v1, err := c.Save(ctx, key, conv)
	require.NoError(t, err)
	_, err = c.Save(ctx, key, conv, checkpoint.ExpectVersion(0))
	require.ErrorIs(t, err, checkpoint.ErrConflict, "compare-and-swap refuses a stale writer")
	more := `{"role":"assistant","content":[{"type":"text","text":"hi"}],"stopReason":"stop"}`
	v2, err := c.Append(ctx, key, v1.Version, []byte(`[`+more+`]`))
	require.NoError(t, err)
	require.Equal(t, uint64(2), v2.Version)
	// Past the server's 1 MiB max_payload: a chunked save.
	big := []byte(`[{"role":"user","content":"` + strings.Repeat("x", 3<<20) + `"}]`)
	v3, err := c.Save(ctx, key, big)
	require.NoError(t, err)

	got, _, err := c.Restore(ctx, key, v2.Version)
	require.NoError(t, err)
	require.Equal(t, `[{"role":"user","content":"hello"},`+more+`]`, string(got))
	got, head, err := c.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(big, got))
	require.Equal(t, v3.Version, head.Version)
	hist, err := c.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, hist, 3)
	sessions, err := c.List(ctx, "old")
	require.NoError(t, err)
	require.Len(t, sessions, 1)

	lease, err := c.Acquire(ctx, key)
	require.NoError(t, err)
	_, err = lease.Save(ctx, conv)
	require.NoError(t, err)
	_, err = c.Save(ctx, key, conv)
	require.ErrorIs(t, err, checkpoint.ErrLeased, "a leased session refuses a save without its epoch")
	require.NoError(t, lease.Release(ctx))
	_, err = c.Fork(ctx, key, v1.Version, checkpoint.Key{Namespace: "old", Session: "fork"})
	require.NoError(t, err)
	pruned, err := c.Prune(ctx, "old", checkpoint.PruneOptions{Session: "s", KeepLast: 1})
	require.NoError(t, err)
	require.NotEmpty(t, pruned)
	_, err = c.Delete(ctx, checkpoint.Key{Namespace: "old", Session: "fork"}, nil)
	require.NoError(t, err)

	// A new daemon finds everything where the first left it.
	stop()
	stop = startDaemon()
	defer stop()
	got, _, err = c.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, string(conv), string(got))
	_, _, err = c.Restore(ctx, checkpoint.Key{Namespace: "old", Session: "fork"}, 0)
	require.True(t, errors.Is(err, checkpoint.ErrNotFound), "deleted: %v", err)
}
