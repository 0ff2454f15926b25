package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// lockedBuffer is a bytes.Buffer the watcher writes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startWatch runs "checkpointctl watch args..." until the returned stop is called, which returns
// its exit code. It returns once the watch is subscribed: a forged result published on the
// default namespace's result subjects (raw NATS, as any client could) is reported on its stderr.
func startWatch(t *testing.T, env *testenv.Env, args ...string) (stdout, stderr *lockedBuffer, stop func() int) {
	t.Helper()
	return startWatchAt(t, env.URL(), env.Conn(), "default", args...)
}

// startWatchAt is startWatch on server, probing with a forged result on namespace's result
// subjects published by probe.
func startWatchAt(t *testing.T, server string, probe *nats.Conn, namespace string, args ...string) (stdout, stderr *lockedBuffer, stop func() int) {
	t.Helper()
	stdout, stderr = &lockedBuffer{}, &lockedBuffer{}
	a := &App{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, append([]string{"--server=" + server, "watch"}, args...)) }()
	nc := probe
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			t.Errorf("watch ended before it was stopped: %v", err)
			return true
		default:
		}
		require.NoError(t, nc.Publish(wire.ResultSubject(namespace, "forged"), []byte("not a result")))
		require.NoError(t, nc.Flush())
		return strings.Contains(stderr.String(), "not a result") || strings.Contains(stderr.String(), "invalid character")
	}, 10*time.Second, 20*time.Millisecond, "stderr: %s", stderr)
	return stdout, stderr, func() int {
		cancel() // what Ctrl-C does (main's signal.NotifyContext)
		select {
		case err := <-done:
			return exitCode(err)
		case <-time.After(10 * time.Second):
			t.Fatal("watch did not end after its context was cancelled")
			return -1
		}
	}
}

// requireOnlyProbeNotices checks that the watch reported nothing but startWatch's forged probes:
// the daemon's own results, refusals included, are no problem.
func requireOnlyProbeNotices(t *testing.T, stderr string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		require.Contains(t, line, ".forged:", stderr)
	}
}

// saveSequence saves, in order: demo v1, a refusal (conflict), demo v2, a duplicate of v2 (same
// save id), an invalid conversation, other/main v1, and demo/helper v1. It returns the versions made.
func saveSequence(t *testing.T, env *testenv.Env) []checkpoint.Version {
	t.Helper()
	c, err := checkpoint.Connect(env.URL(), nil)
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	conv := `[{"role":"user","content":"hi"}]`
	conv2 := `[{"role":"user","content":"hi"},{"role":"user","content":"again"}]`
	var made []checkpoint.Version
	save := func(key checkpoint.Key, body string, opts ...checkpoint.SaveOption) {
		v, err := c.Save(ctx, key, []byte(body), opts...)
		require.NoError(t, err)
		made = append(made, v)
	}
	demo := checkpoint.Key{Session: "demo"}
	save(demo, conv)
	_, err = c.Save(ctx, demo, []byte(conv2), checkpoint.ExpectVersion(7))
	require.ErrorIs(t, err, checkpoint.ErrConflict)
	save(demo, conv2, checkpoint.WithSaveID("turn-2"))
	dup, err := c.Save(ctx, demo, []byte(conv2), checkpoint.WithSaveID("turn-2"))
	require.NoError(t, err)
	require.Equal(t, uint64(2), dup.Version)
	_, err = c.Save(ctx, demo, []byte(`[{"role":"user"}]`))
	require.ErrorIs(t, err, checkpoint.ErrInvalid)
	save(checkpoint.Key{Session: "other"}, conv)
	save(checkpoint.Key{Session: "demo", Agent: "helper"}, conv)
	return made
}

func TestCheckpointctl_Watch(t *testing.T) {
	env := testenv.Start(t)
	stdout, stderr, stop := startWatch(t, env, "-o", "json")
	made := saveSequence(t, env)
	require.Eventually(t, func() bool { return strings.Count(stdout.String(), "\n") >= len(made) },
		10*time.Second, 10*time.Millisecond, "stdout: %s", stdout.String())
	time.Sleep(100 * time.Millisecond) // a refusal or duplicate printed late would show now
	require.Equal(t, 0, stop(), stderr.String())
	requireOnlyProbeNotices(t, stderr.String())

	var got []checkpoint.Version
	sc := bufio.NewScanner(strings.NewReader(stdout.String()))
	for sc.Scan() { // JSON Lines: one object per line
		var v checkpoint.Version
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v), sc.Text())
		got = append(got, v)
	}
	require.Equal(t, made, got)
}

func TestCheckpointctl_WatchSession(t *testing.T) {
	env := testenv.Start(t)
	stdout, stderr, stop := startWatch(t, env, "demo")
	saveSequence(t, env)
	// demo v1, demo v2 and demo/helper v1; not other/main, refusals or the duplicate.
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "agent helper") },
		10*time.Second, 10*time.Millisecond, "stdout: %s", stdout.String())
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, 0, stop(), stderr.String())
	requireOnlyProbeNotices(t, stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, 3, stdout.String())
	for i, want := range []string{"demo  agent main  version 1  turn", "demo  agent main  version 2  turn", "demo  agent helper  version 1  turn"} {
		require.Contains(t, lines[i], want)
	}
	require.Contains(t, lines[1], "2 messages")
}

// A result naming another namespace's key, a version not of its key, or a well-formed version the
// daemon does not hold (or holds otherwise) is reported, not shown.
func TestCheckpointctl_WatchForgedResults(t *testing.T) {
	env := testenv.Start(t)
	real, err := env.Client.Save(context.Background(), checkpoint.Key{Session: "real"}, []byte(`[{"role":"user","content":"hi"}]`))
	require.NoError(t, err)
	stdout, stderr, stop := startWatch(t, env)
	nc := env.Conn()
	v := wire.Version{Key: wire.Key{Namespace: "bob", Session: "s", Agent: "main"}, Version: 1, Reason: "turn"}
	inDefault := wire.Version{Key: wire.Key{Namespace: "default", Session: "s", Agent: "main"}, Version: 1, Reason: "turn"}
	altered := real
	altered.Writer = "mallory"
	for _, res := range []wire.SaveResult{
		{SaveID: "x", Key: v.Key, OK: true, Version: &v},                                                        // another namespace
		{SaveID: "y", Key: wire.Key{Namespace: "default", Session: "s", Agent: "main"}, OK: true, Version: &v},  // version of another key
		{SaveID: "w", Key: inDefault.Key, OK: true, Version: &inDefault},                                        // a version never saved
		{SaveID: "v", Key: real.Key, OK: true, Version: &altered},                                               // a stored version, altered
		{SaveID: "z", Key: wire.Key{Namespace: "default", Session: "s", Agent: "main"}, OK: true, Version: nil}, // no version
	} {
		data, err := json.Marshal(res)
		require.NoError(t, err)
		require.NoError(t, nc.Publish(wire.ResultSubject("default", res.SaveID), data))
	}
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), `save "z"`) }, 10*time.Second, 10*time.Millisecond, stderr.String())
	require.Equal(t, 0, stop())
	require.Empty(t, stdout.String())
	require.Contains(t, stderr.String(), `save "x"`)
	require.Contains(t, stderr.String(), `save "y"`)
	require.Contains(t, stderr.String(), "s version 1 could not be confirmed: session default/s/main: not found")
	require.Contains(t, stderr.String(), "a forged result")
}

// With --tenants, a tenant's login watches its own namespace with what it already imports
// (cp.saved.<ns>.> and cp.result.<ns>.>), and sees nothing of another tenant's saves.
func TestCheckpointctl_WatchTenant(t *testing.T) {
	tenants := &embedded.Tenants{Tenants: []embedded.Tenant{
		{Namespace: "alice", Login: embedded.Login{User: "alice", Password: "alice-pw"}},
		{Namespace: "bob", Login: embedded.Login{User: "bob", Password: "bob-pw"}}}}
	env := testenv.StartTenancy(t, tenants, 0)
	login := func(user string) string { return "nats://" + user + "@" + strings.TrimPrefix(env.URL(), "nats://") }
	probe, err := env.Conn(nats.UserInfo("alice", "alice-pw"))
	require.NoError(t, err)
	defer probe.Close()
	stdout, stderr, stop := startWatchAt(t, login("alice:alice-pw"), probe, "alice", "-n", "alice", "-o", "json")

	conv := []byte(`[{"role":"user","content":"hi"}]`)
	bob := env.Client(nats.UserInfo("bob", "bob-pw"))
	defer bob.Close()
	_, err = bob.Save(context.Background(), checkpoint.Key{Namespace: "bob", Session: "s"}, conv)
	require.NoError(t, err)
	alice := env.Client(nats.UserInfo("alice", "alice-pw"))
	defer alice.Close()
	v, err := alice.Save(context.Background(), checkpoint.Key{Namespace: "alice", Session: "s"}, conv)
	require.NoError(t, err)

	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "\n") }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // bob's save, had it leaked, would show by now
	require.Equal(t, 0, stop(), stderr.String())
	requireOnlyProbeNotices(t, stderr.String())
	var got checkpoint.Version
	require.NoError(t, json.Unmarshal([]byte(stdout.String()), &got))
	require.Equal(t, v, got)
	require.Equal(t, 1, strings.Count(stdout.String(), "\n"), stdout.String())
}

// A watch shows saves of both paths: sent as requests (result announced on cp.saved, not stored)
// and taken off the ingest stream (result stored on cp.result) (protocol.md §4.3).
func TestCheckpointctl_WatchSeesRequestAndIngestSaves(t *testing.T) {
	env := testenv.Start(t)
	stdout, stderr, stop := startWatch(t, env, "-o", "json")
	c, err := checkpoint.Connect(env.URL(), nil)
	require.NoError(t, err)
	defer c.Close()
	requested, err := c.Save(context.Background(), checkpoint.Key{Session: "by-request"}, []byte(`[{"role":"user","content":"hi"}]`))
	require.NoError(t, err)

	// The fallback path, with raw NATS: a save published on the ingest stream.
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	m := nats.NewMsg(wire.IngestSubject(checkpoint.Key{Session: "by-ingest"}.WithDefaults()))
	m.Header.Set(wire.HdrSaveID, "ingested-1")
	m.Header.Set(wire.HdrMsgID, "ingested-1")
	m.Data = []byte(`[{"role":"user","content":"hello"}]`)
	_, err = js.PublishMsg(context.Background(), m)
	require.NoError(t, err)

	require.Eventually(t, func() bool { return strings.Count(stdout.String(), "\n") >= 2 },
		10*time.Second, 10*time.Millisecond, "stdout: %s", stdout.String())
	require.Equal(t, 0, stop(), stderr.String())
	requireOnlyProbeNotices(t, stderr.String())
	sessions := map[string]checkpoint.Version{}
	sc := bufio.NewScanner(strings.NewReader(stdout.String()))
	for sc.Scan() {
		var v checkpoint.Version
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v), sc.Text())
		sessions[v.Key.Session] = v
	}
	require.Len(t, sessions, 2, stdout.String())
	require.Equal(t, requested, sessions["by-request"])
	require.Equal(t, "ingested-1", sessions["by-ingest"].SaveID)
}
