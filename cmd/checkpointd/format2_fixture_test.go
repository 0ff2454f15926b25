package main

// The format-2 fixture (testdata/format2, README.md there): a data directory written by today's
// five-bucket engine, kept so that the engine replacing it (docs/format.md §8) can be tested on
// what checkpointd really wrote (§8.17). TestFormat2Fixture_Write regenerates it;
// TestFormat2Fixture_Serves checks, on every run, that the daemon serves the directory exactly as
// its manifest says. After the switch to the new engine, the same comparison
// (testenv.CompareFormat2) runs on the directory once upgraded.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// format2Fixture is the fixture's directory, from this package.
const format2Fixture = "../../testdata/format2"

// The fixture's two data directories, each with its manifest: the store stopped cleanly, and the
// store left by a SIGKILL in the middle of a burst of saves.
var format2Variants = []struct{ store, manifest string }{
	{"store.tar.gz", "manifest.json"},
	{"crash.tar.gz", "crash-manifest.json"},
}

// maxFixtureBytes bounds what a fixture archive may unpack to.
const maxFixtureBytes = 256 << 20

// Every version of every session of the fixture is served as its manifest says: records, bytes,
// leases, moved state, retention's first versions, deleted sessions gone. This is the test the
// upgrade test becomes: the same comparison, on the directory after the new engine upgraded it.
func TestFormat2Fixture_Serves(t *testing.T) {
	for _, v := range format2Variants {
		t.Run(v.store, func(t *testing.T) {
			checkFormat2Fixture(t, filepath.Join(format2Fixture, v.store), filepath.Join(format2Fixture, v.manifest))
		})
	}
}

// The comparison finds each kind of difference, so that the tests above (and the upgrade test)
// cannot pass by comparing too little: each case changes one thing in a copy of the manifest.
func TestCompareFormat2_FindsEveryDifference(t *testing.T) {
	m, err := testenv.ReadFormat2Manifest(filepath.Join(format2Fixture, "manifest.json"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, testenv.ExtractTarGz(filepath.Join(format2Fixture, "store.tar.gz"), dir, maxFixtureBytes))
	d := startInProcess(t, dir)
	defer d.stop(t)
	c := d.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	session := func(m *testenv.Format2Manifest, name string) *testenv.Format2Session {
		for i := range m.Sessions {
			if m.Sessions[i].Key.Session == name {
				return &m.Sessions[i]
			}
		}
		t.Fatalf("the fixture has no session %q", name)
		return nil
	}
	for _, tc := range []struct {
		name, want string
		change     func(m *testenv.Format2Manifest)
	}{
		{"record field", "version 2 record", func(m *testenv.Format2Manifest) {
			session(m, "chat-appends").Versions[1].Record.Writer = "someone else"
		}},
		{"record origin", "version 1 record", func(m *testenv.Format2Manifest) { session(m, "imported").Versions[0].Record.Origin = nil }},
		{"conversation", "version 3 conversation sha256", func(m *testenv.Format2Manifest) { session(m, "openhands-todo-app").Versions[2].SHA256 = sha256Hex(nil) }},
		{"lease", "lease", func(m *testenv.Format2Manifest) { session(m, "leased-held").Lease.Owner = "another owner" }},
		{"lease of a session without versions", "lease", func(m *testenv.Format2Manifest) { session(m, "leased-before-first-save").Lease.Epoch++ }},
		{"moved", "moved", func(m *testenv.Format2Manifest) { session(m, "moved-away").Moved = nil }},
		{"pruned version back", "version 5 is not served", func(m *testenv.Format2Manifest) {
			s := session(m, "pruned-by-retention")
			v := s.Versions[0]
			v.Record.Version--
			s.Versions, s.FirstVersion = append([]testenv.Format2Version{v}, s.Versions...), 5
		}},
		{"session missing", "is listed but not in the manifest", func(m *testenv.Format2Manifest) { m.Sessions = m.Sessions[1:] }},
		{"deleted session served", "deleted session", func(m *testenv.Format2Manifest) { m.Deleted = append(m.Deleted, m.Sessions[0].Key) }},
		{"acknowledged version lost", "below the acknowledged version", func(m *testenv.Format2Manifest) {
			m.Complete = false
			s := session(m, "busy-appends")
			v := s.Versions[len(s.Versions)-1]
			v.Record.Version++
			s.Versions, s.Head = append(s.Versions, v), v.Record.Version
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var changed testenv.Format2Manifest
			b, err := json.Marshal(m)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &changed))
			tc.change(&changed)
			err = testenv.CompareFormat2(ctx, c, changed)
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.NoError(t, testenv.CompareFormat2(ctx, c, m), "the manifest itself")
}

// checkFormat2Fixture unpacks a fixture store into a temporary directory, runs checkpointd on it
// and compares what it serves with the manifest.
func checkFormat2Fixture(t *testing.T, store, manifest string) {
	m, err := testenv.ReadFormat2Manifest(manifest)
	require.NoError(t, err)
	require.NotEmpty(t, m.Sessions, manifest)
	dir := t.TempDir()
	require.NoError(t, testenv.ExtractTarGz(store, dir, maxFixtureBytes))

	d := startInProcess(t, dir)
	defer d.stop(t)
	c := d.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, testenv.CompareFormat2(ctx, c, m), "%s against %s", store, manifest)
}

// inProcessDaemon is checkpointd as its command line runs it (run), embedded NATS server and all,
// inside the test process.
type inProcessDaemon struct {
	url    string
	cancel context.CancelFunc
	done   chan error
	logs   *syncBuffer
}

// startInProcess runs checkpointd on dataDir with extra flags and waits until it is healthy.
func startInProcess(t *testing.T, dataDir string, extra ...string) *inProcessDaemon {
	t.Helper()
	natsAddr, httpAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	d := &inProcessDaemon{url: "nats://" + natsAddr, cancel: cancel, done: make(chan error, 1), logs: &syncBuffer{}}
	args := append([]string{"--data-dir", dataDir, "--nats-listen", natsAddr, "--http-listen", httpAddr, "--log-level", "warn"}, extra...)
	go func() { d.done <- run(ctx, args, d.logs) }()
	deadline := time.Now().Add(30 * time.Second)
	for !healthy(httpAddr) {
		select {
		case err := <-d.done:
			t.Fatalf("checkpointd stopped while starting: %v\n%s", err, d.logs)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("checkpointd on %s: /healthz never answered %d\n%s", dataDir, http.StatusOK, d.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return d
}

// client connects an SDK client, closed when the test ends.
func (d *inProcessDaemon) client(t *testing.T, opts ...checkpoint.Option) *checkpoint.Client {
	t.Helper()
	c, err := checkpoint.Connect(d.url, nil, append([]checkpoint.Option{checkpoint.WithTimeout(30 * time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// stop shuts checkpointd down as SIGTERM does and requires a clean exit.
func (d *inProcessDaemon) stop(t *testing.T) {
	t.Helper()
	d.cancel()
	select {
	case err := <-d.done:
		require.NoError(t, err, "checkpointd's shutdown:\n%s", d.logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("checkpointd did not stop\n%s", d.logs)
	}
}

// writeJSON writes v indented, with a final newline.
func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(v))
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
}

func fileSize(t *testing.T, path string) string {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return fmt.Sprintf("%.1f KiB", float64(st.Size())/1024)
}
