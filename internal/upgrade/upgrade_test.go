package upgrade

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/sealing"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/snapshot/kvstore"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/checkpointd/checkpointd/internal/wire"
)

const fixtureDir = "../../testdata/format2"

// store is a data directory with a NATS server running on it (embedded, as checkpointd runs it),
// and the log engine the daemon would open on it.
type store struct {
	dir string
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	log *logstore.Log
	eng *engine.Engine
}

// unpack extracts a fixture archive into a new temporary directory.
func unpack(t testing.TB, archive string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, testenv.ExtractTarGz(filepath.Join(fixtureDir, archive), dir, 256<<20))
	return dir
}

// open starts a server on dir and opens the log engine on it, as the daemon does before it calls
// Run. The server stops when the test ends (or at close).
func open(t testing.TB, dir string) *store {
	t.Helper()
	srv, err := embedded.StartServer(embedded.ServerConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	log, err := logstore.OpenLog(context.Background(), nc, logstore.LogConfig{})
	require.NoError(t, err)
	s := &store{dir: dir, srv: srv, nc: nc, js: js, log: log, eng: engine.New(log, engine.Config{})}
	t.Cleanup(s.close)
	return s
}

func (s *store) close() {
	if s.srv == nil {
		return
	}
	s.nc.Close()
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.srv = nil
}

// reopen stops the server and starts it again on the same directory, with a new engine: what a
// daemon restart sees.
func (s *store) reopen(t testing.TB) *store {
	t.Helper()
	s.close()
	return open(t, s.dir)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testOptions() Options { return Options{Owner: "test", Logger: quiet} }

// stepNames runs a whole upgrade of archive and returns what each of its writes was, in order.
func stepNames(t *testing.T, archive string) []string {
	t.Helper()
	s := open(t, unpack(t, archive))
	var names []string
	opts := testOptions()
	opts.step = func(_ int, what string) error { names = append(names, what); return nil }
	_, err := Run(context.Background(), s.js, s.eng, s.log, opts)
	require.NoError(t, err)
	return names
}

var errKilled = errors.New("killed by the test")

// runKilledAt runs the upgrade on s and stops it right after its k-th write, as a kill would.
func runKilledAt(t *testing.T, s *store, k int) {
	t.Helper()
	opts := testOptions()
	opts.step = func(n int, _ string) error {
		if n == k {
			return errKilled
		}
		return nil
	}
	_, err := Run(context.Background(), s.js, s.eng, s.log, opts)
	require.ErrorIs(t, err, errKilled)
}

// checkUpgraded checks that s is in the new format and serves exactly the manifest: every
// session, version, record (but its storage facts), conversation hash, lease and seal; deleted
// sessions absent; format 2's buckets gone; the marker done.
func checkUpgraded(t *testing.T, s *store, manifest string) {
	t.Helper()
	ctx := context.Background()
	m, err := testenv.ReadFormat2Manifest(filepath.Join(fixtureDir, manifest))
	require.NoError(t, err)
	require.NoError(t, testenv.CompareFormat2Upgraded(ctx, engineServed{s.eng}, m))
	need, err := Needed(ctx, s.js)
	require.NoError(t, err)
	require.False(t, need, "format 2's buckets are gone")
	for _, b := range Buckets {
		_, err := s.js.Stream(ctx, "KV_"+b)
		require.ErrorIs(t, err, jetstream.ErrStreamNotFound, b)
	}
	u := &upgrader{opts: testOptions().withDefaults()}
	u.stream, err = s.js.Stream(ctx, "CP_LOG")
	require.NoError(t, err)
	mk, _, err := readMarker(ctx, u.stream)
	require.NoError(t, err)
	require.Equal(t, stateDone, mk.State)
}

// The fixture written by format 2 (a clean stop, and a SIGKILL with saves queued) is upgraded
// and then holds exactly what its manifest lists; the queued saves stay in CP_INGEST, untouched,
// for the new daemon to settle; a second start finds nothing to do.
func TestRun_Fixture(t *testing.T) {
	for _, v := range []struct{ store, manifest string }{{"store.tar.gz", "manifest.json"}, {"crash.tar.gz", "crash-manifest.json"}} {
		t.Run(v.store, func(t *testing.T) {
			ctx := context.Background()
			s := open(t, unpack(t, v.store))
			need, err := Needed(ctx, s.js)
			require.NoError(t, err)
			require.True(t, need)
			before := queueState(t, s.js)

			rep, err := Run(ctx, s.js, s.eng, s.log, testOptions())
			require.NoError(t, err)
			require.Equal(t, Buckets, rep.BucketsDeleted)
			require.Zero(t, rep.Skipped+rep.Redone+rep.Purged)
			t.Logf("%s: %+v", v.store, rep)

			require.Equal(t, before, queueState(t, s.js), "CP_INGEST and its consumer are left as they were")
			checkUpgraded(t, s, v.manifest)
			s = s.reopen(t)
			checkUpgraded(t, s, v.manifest)
			rep, err = Run(ctx, s.js, s.eng, s.log, testOptions())
			require.NoError(t, err)
			require.Equal(t, Report{Took: rep.Took}, rep, "nothing left to do")
		})
	}
}

// queueState is CP_INGEST's state and its consumer's: what the upgrade must leave alone.
func queueState(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, wire.StreamIngest)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	out := fmt.Sprintf("msgs %d bytes %d first %d last %d", info.State.Msgs, info.State.Bytes, info.State.FirstSeq, info.State.LastSeq)
	for name := range st.ConsumerNames(ctx).Name() {
		c, err := st.Consumer(ctx, name)
		require.NoError(t, err)
		ci := c.CachedInfo()
		out += fmt.Sprintf("; consumer %s delivered %d ack floor %d pending %d", name, ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumPending)
	}
	return out
}

// A run stopped after any of its writes — the marker, a version in the middle of a session, a
// session's lease, a pack, the last version, the marker "done", a bucket's deletion — leaves
// format 2 whole or the new format whole, and the next run finishes the upgrade: the result is
// exactly the manifest.
func TestRun_KilledAfterWrite(t *testing.T) {
	names := stepNames(t, "store.tar.gz")
	var ks []int
	pick := func(match func(string) bool, which int) {
		var idx []int
		for i, n := range names {
			if match(n) {
				idx = append(idx, i+1)
			}
		}
		require.NotEmpty(t, idx)
		if which < 0 {
			which += len(idx)
		}
		ks = append(ks, idx[min(which, len(idx)-1)])
	}
	has := func(s string) func(string) bool { return func(n string) bool { return strings.Contains(n, s) } }
	pick(has("marker started"), 0)
	pick(has("version 1 of"), 0)                                             // a session's first version
	pick(has("chat-appends"), 10)                                            // the middle of a 21-version session
	pick(func(n string) bool { return strings.HasPrefix(n, "state of") }, 0) // a lease
	pick(func(n string) bool { return strings.HasPrefix(n, "version") }, -1) // the last version
	pick(has("marker done"), 0)                                              // done, no bucket deleted
	pick(has("deleted bucket "+wire.BucketHeads), 0)                         // cp_heads gone, four left
	pick(has("deleted bucket "+wire.BucketSegment), 0)                       // one left
	ks = append(ks, len(names)/3, 2*len(names)/3)
	slices.Sort(ks)
	ks = slices.Compact(ks)
	t.Logf("%d writes; stopping after %v", len(names), ks)
	for _, k := range ks {
		t.Run(fmt.Sprintf("after write %d (%s)", k, names[k-1]), func(t *testing.T) {
			s := open(t, unpack(t, "store.tar.gz"))
			runKilledAt(t, s, k)
			s = s.reopen(t)
			rep, err := Run(context.Background(), s.js, s.eng, s.log, testOptions())
			require.NoError(t, err)
			if k < len(names)-len(Buckets) { // before "done": the next run copies what was left
				require.Equal(t, 24, rep.Sessions+rep.Skipped, "every session once (24 with a version or a lease): %+v", rep)
				require.LessOrEqual(t, rep.Redone, 1, "%+v", rep)
			} else {
				require.True(t, rep.AlreadyDone)
			}
			checkUpgraded(t, s, "manifest.json")
		})
	}
}

// Runs killed one after the other at different points, each leaving a session half-copied,
// converge: the last run redoes the half-copied session and finishes.
func TestRun_KilledRepeatedly(t *testing.T) {
	s := open(t, unpack(t, "store.tar.gz"))
	for _, k := range []int{7, 3, 25, 2, 40} {
		runKilledAt(t, s, k)
		s = s.reopen(t)
	}
	rep, err := Run(context.Background(), s.js, s.eng, s.log, testOptions())
	require.NoError(t, err)
	require.Positive(t, rep.Redone, "%+v", rep)
	require.Positive(t, rep.Skipped, "%+v", rep)
	checkUpgraded(t, s, "manifest.json")
}

// A session that format 2 deleted after a killed run had copied it (an older checkpointd ran in
// between) is purged from the log; a session it changed is copied again.
func TestRun_Format2ChangedBetweenRuns(t *testing.T) {
	ctx := context.Background()
	names := stepNames(t, "store.tar.gz")
	last := slices.IndexFunc(names, func(n string) bool { return strings.Contains(n, "marker done") })
	s := open(t, unpack(t, "store.tar.gz"))
	runKilledAt(t, s, last) // every session copied, no "done"

	st, err := kvstore.OpenStore(ctx, s.js, kvstore.StoreConfig{Replicas: 1, ChunkSize: 64 << 10})
	require.NoError(t, err)
	gone := snapshot.Key{Namespace: "team", Session: "screenshot-b", Agent: "main"}
	_, err = snapshotDelete(ctx, st, gone)
	require.NoError(t, err)
	leased := snapshot.Key{Namespace: "team", Session: "a.b", Agent: "main"}
	lease, err := snapshotAcquire(ctx, st, leased)
	require.NoError(t, err)

	s = s.reopen(t)
	rep, err := Run(ctx, s.js, s.eng, s.log, testOptions())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Purged, "%+v", rep)
	require.Equal(t, 1, rep.Redone, "%+v", rep)
	_, err = s.eng.HeadState(ctx, keyOf(gone))
	require.ErrorIs(t, err, engine.ErrNotFound)
	ls, err := s.eng.LeaseStatus(ctx, keyOf(leased))
	require.NoError(t, err)
	require.Equal(t, lease.Epoch, ls.Lease.Epoch)
	require.Equal(t, lease.Owner, ls.Lease.Owner)
}

// After "done", a format 2 that changed (an older daemon wrote to it) is not deleted: the run
// refuses with ErrChangedAfter, and changes nothing.
func TestRun_ChangedAfterDone(t *testing.T) {
	ctx := context.Background()
	names := stepNames(t, "store.tar.gz")
	done := slices.IndexFunc(names, func(n string) bool { return strings.Contains(n, "marker done") }) + 1
	s := open(t, unpack(t, "store.tar.gz"))
	runKilledAt(t, s, done)

	st, err := kvstore.OpenStore(ctx, s.js, kvstore.StoreConfig{Replicas: 1, ChunkSize: 64 << 10})
	require.NoError(t, err)
	_, err = snapshotAcquire(ctx, st, snapshot.Key{Namespace: "team", Session: "a.b", Agent: "main"})
	require.NoError(t, err)
	_, err = Run(ctx, s.js, s.eng, s.log, testOptions())
	require.ErrorIs(t, err, ErrChangedAfter)
	require.ErrorContains(t, err, "team/a.b/main")
	need, err := Needed(ctx, s.js)
	require.NoError(t, err)
	require.True(t, need, "nothing deleted")
	present, err := presentBuckets(ctx, s.js)
	require.NoError(t, err)
	require.Equal(t, Buckets, present)
}

// Another process's unfinished run is taken over only once its marker has stayed still for
// StaleAfter: this run waits that long, watching it, and then goes on; the run it took over stops
// at its next marker write. With Embedded (no other daemon can run on the store), at once.
func TestRun_AnotherDaemonUpgrading(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := open(t, unpack(t, "store.tar.gz"))
	other := testOptions()
	other.Owner, other.process = "other-host", "other-process"
	runKilledAtOpts(t, s, 1, other) // other-host wrote "started" and died

	opts := testOptions()
	opts.StaleAfter = 300 * time.Millisecond
	began := time.Now()
	runKilledAtOpts(t, s, 1, opts) // waited, took over, wrote its "started"
	require.GreaterOrEqual(t, time.Since(began), opts.StaleAfter, "took over only once the marker had stayed still")
	u := &upgrader{js: s.js, opts: other.withDefaults(), markSeq: 1}
	var err error
	u.stream, err = s.js.Stream(ctx, "CP_LOG")
	require.NoError(t, err)
	require.ErrorIs(t, u.writeMarker(ctx, stateStarted), ErrInProgress, "a run whose marker moved stops")

	embedded := testOptions()
	embedded.process = "a-new-process"
	embedded.Embedded = true // StaleAfter is a minute: waiting would outlast ctx
	_, err = Run(ctx, s.js, s.eng, s.log, embedded)
	require.NoError(t, err)
	checkUpgraded(t, s, "manifest.json")
}

// A run of another process that is alive (it writes its marker again and again) is never taken
// over, whatever its owner's name and its host's clock say: its host may be this one (two daemons
// on one host, with --nats-url: no data directory's lock between them), and its clock may be off
// by any amount, so staleness is the marker not moving for StaleAfter of this host's clock.
func TestRun_AnotherProcessAliveIsNotTakenOver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		owner string
		skew  time.Duration
	}{
		{"same owner name, another process", "test", 0},
		{"its clock an hour behind", "other-host", -time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s := open(t, unpack(t, "store.tar.gz"))
			other := testOptions()
			other.Owner, other.process = tc.owner, "other-process"
			other.Now = func() time.Time { return time.Now().Add(tc.skew) }
			stop := runAlive(t, s, other)
			opts := testOptions()
			opts.StaleAfter = 5 * time.Second
			_, err := Run(ctx, s.js, s.eng, s.log, opts)
			stop()
			require.ErrorIs(t, err, ErrInProgress)
			namespaces, err := s.log.Namespaces(ctx)
			require.NoError(t, err)
			require.Empty(t, namespaces, "nothing copied")
		})
	}
}

// runAlive plays another daemon's run that claimed the upgrade and is alive: it writes "started",
// then writes it again every 20 ms until stop is called.
func runAlive(t *testing.T, s *store, opts Options) (stop func()) {
	t.Helper()
	ctx := context.Background()
	u := &upgrader{js: s.js, opts: opts.withDefaults(), started: opts.Now(), runID: "alive"}
	var err error
	u.stream, err = s.js.Stream(ctx, "CP_LOG")
	require.NoError(t, err)
	require.NoError(t, u.writeMarker(ctx, stateStarted))
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if u.writeMarker(ctx, stateStarted) != nil {
				return
			}
		}
	}()
	return func() { close(done); <-stopped }
}

func runKilledAtOpts(t *testing.T, s *store, k int, opts Options) {
	t.Helper()
	opts.step = func(n int, _ string) error {
		if n == k {
			return errKilled
		}
		return nil
	}
	_, err := Run(context.Background(), s.js, s.eng, s.log, opts)
	require.ErrorIs(t, err, errKilled)
}

// A store without format 2 needs nothing; Refusal gives the commands to move the data by hand.
func TestNeeded_AndRefusal(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	need, err := Needed(ctx, s.js)
	require.NoError(t, err)
	require.False(t, need)
	rep, err := Run(ctx, s.js, s.eng, s.log, testOptions())
	require.NoError(t, err)
	require.Equal(t, Report{Took: rep.Took}, rep)
	_, err = s.js.Stream(ctx, "KV_"+wire.BucketHeads)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "Run creates no bucket")

	err = Refusal("/var/lib/checkpointd")
	require.ErrorIs(t, err, ErrRefused)
	for _, want := range []string{"/var/lib/checkpointd", "without --no-upgrade", "checkpointctl export -A --file all.cpbundle", "checkpointctl import all.cpbundle"} {
		require.Contains(t, err.Error(), want)
	}
}

// A marker this code did not write is refused, and nothing is copied.
func TestRun_UnknownMarker(t *testing.T) {
	ctx := context.Background()
	s := open(t, unpack(t, "store.tar.gz"))
	_, err := s.js.Publish(ctx, MarkerSubject, []byte(`{"format":9,"from":2,"state":"started"}`))
	require.NoError(t, err)
	_, err = Run(ctx, s.js, s.eng, s.log, testOptions())
	require.ErrorIs(t, err, ErrMarker)
	namespaces, err := s.log.Namespaces(ctx)
	require.NoError(t, err)
	require.Empty(t, namespaces)
}

// engineServed is what the engine holds, as the comparison of testenv reads a daemon: the
// listing shows sessions with a version, records in the protocol's form (format 2's record
// format; gen is a storage fact the comparison ignores).
type engineServed struct{ e *engine.Engine }

var _ testenv.Served = engineServed{}

func (s engineServed) ListAll(ctx context.Context) ([]checkpoint.Session, error) {
	namespaces, err := s.e.Namespaces(ctx)
	if err != nil {
		return nil, err
	}
	var out []checkpoint.Session
	for _, ns := range namespaces {
		for cursor := uint64(0); ; {
			heads, next, err := s.e.Sessions(ctx, ns, cursor, 1000)
			if err != nil {
				return nil, err
			}
			for _, h := range heads {
				if h.Record.Version == 0 {
					continue // leased before its first version: not listed
				}
				out = append(out, checkpoint.Session{Version: versionOf(h.Record), Lease: leaseInfo(h.Record.Key, h.Lease, h.Record.Version), Moved: movedInfo(h.Moved)})
			}
			if next == 0 {
				break
			}
			cursor = next
		}
	}
	return out, nil
}

func (s engineServed) LeaseStatus(ctx context.Context, key checkpoint.Key) (checkpoint.LeaseInfo, error) {
	ls, err := s.e.LeaseStatus(ctx, engineKey(key))
	if err != nil {
		return checkpoint.LeaseInfo{}, err
	}
	return *leaseInfo(engineKey(key), &ls.Lease, ls.Head), nil
}

func (s engineServed) History(ctx context.Context, key checkpoint.Key) ([]checkpoint.Version, error) {
	recs, err := s.e.History(ctx, engineKey(key))
	if err != nil {
		return nil, notFound(err)
	}
	out := make([]checkpoint.Version, len(recs))
	for i, r := range recs {
		out[i] = versionOf(r)
	}
	return out, nil
}

func (s engineServed) Restore(ctx context.Context, key checkpoint.Key, version uint64) ([]byte, error) {
	conv, rec, err := s.e.Read(ctx, engineKey(key), version, engine.ReadOptions{Verify: true})
	if err == nil && int64(len(conv)) != rec.RawBytes {
		err = fmt.Errorf("version %d: %d bytes, its record says %d", version, len(conv), rec.RawBytes)
	}
	return conv, notFound(err)
}

func (s engineServed) Get(ctx context.Context, key checkpoint.Key, version uint64) (checkpoint.Version, error) {
	var rec engine.Record
	var err error
	if version == 0 {
		rec, err = s.e.Head(ctx, engineKey(key))
	} else {
		rec, err = s.e.Version(ctx, engineKey(key), version)
	}
	return versionOf(rec), notFound(err)
}

func notFound(err error) error {
	if errors.Is(err, engine.ErrNotFound) {
		return fmt.Errorf("%w: %v", checkpoint.ErrNotFound, err)
	}
	return err
}

func engineKey(k checkpoint.Key) engine.Key {
	k = k.WithDefaults()
	return engine.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
}

// asProtocols is a format-2 record as clients of format 2 saw it: the same JSON, read as the
// protocol's record (format 2 spelled its records as the protocol did).
func asProtocols(t *testing.T, v snapshot.Version) checkpoint.Version {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out checkpoint.Version
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

func wireKey(k engine.Key) wire.Key {
	return wire.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
}

func versionOf(r engine.Record) checkpoint.Version {
	v := checkpoint.Version{Format: wire.VersionFormat, Key: wireKey(r.Key), Version: r.Version, Parent: r.Parent, Hash: r.Hash,
		SaveID: r.SaveID, Writer: r.Writer, Reason: r.Reason, Created: r.Created, RawBytes: r.RawBytes, StoredBytes: r.StoredBytes,
		Dialect: r.Dialect, Counts: wire.Counts{Messages: r.Counts.Messages, User: r.Counts.User, Assistant: r.Counts.Assistant,
			ToolResult: r.Counts.ToolResult, Extension: r.Counts.Extension, ToolCalls: r.Counts.ToolCalls, System: r.Counts.System}}
	if f := r.ForkOf; f != nil {
		v.ForkOf = &wire.ForkRef{Key: wireKey(f.Key), Version: f.Version}
	}
	if o := r.Origin; o != nil {
		v.Origin = &wire.Origin{Via: o.Via, Source: o.Source, At: o.At}
	}
	return v
}

func leaseInfo(k engine.Key, l *engine.Lease, head uint64) *wire.Lease {
	if l == nil {
		return nil
	}
	return &wire.Lease{Key: wireKey(k), Epoch: l.Epoch, Owner: l.Owner, Acquired: l.Acquired, Expires: l.Expires, Head: head}
}

func movedInfo(m *engine.Moved) *wire.Moved {
	if m == nil {
		return nil
	}
	return &wire.Moved{To: m.To, At: m.At}
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(runChild(dir))
	}
	os.Exit(m.Run())
}

// A format 2 sealed with namespace keys: read without them, the copy fails on the first sealed
// piece and nothing is deleted; with them, Run refuses (ErrSealed) unless the log it writes to
// seals too (Options.LogSeals), and then copies them through internal/sealing's Log over CP_LOG,
// as the daemon wraps it: every entry of the sealed namespace on the stream is an envelope, and
// neither the conversation nor the writer is there in clear.
func TestRun_NamespaceKeys(t *testing.T) {
	ctx := context.Background()
	file := []byte(`{"*":"` + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)) + `"}`)
	keys, err := sealing.ParseKeys(file)
	require.NoError(t, err)
	s := open(t, t.TempDir())
	st, err := kvstore.OpenStore(ctx, s.js, kvstore.StoreConfig{Replicas: 1, ChunkSize: 64 << 10, Keys: keys})
	require.NoError(t, err)
	key := snapshot.Key{Namespace: "secret", Session: "s", Agent: "main"}
	const secret, writer = "the launch code is 0000", "writer-known-only-to-alice"
	conv := []byte(`[{"role":"user","content":[{"type":"text","text":"` + secret + `"}]}]`)
	_, err = snapshot.Save(ctx, st, snapshot.SaveRequest{Key: key, SaveID: "1", Writer: writer, Payload: conv, Now: time.Now()})
	require.NoError(t, err)

	_, err = Run(ctx, s.js, s.eng, s.log, testOptions())
	require.ErrorIs(t, err, snapshot.ErrCorrupt, "sealed pieces do not open without the keys")
	need, err := Needed(ctx, s.js)
	require.NoError(t, err)
	require.True(t, need)

	opts := testOptions()
	opts.Keys = keys
	_, err = Run(ctx, s.js, s.eng, s.log, opts)
	require.ErrorIs(t, err, ErrSealed)

	sealingKeys, err := sealing.ParseKeys(file)
	require.NoError(t, err)
	sealed := sealing.NewLog(s.log, sealingKeys) // as the daemon wraps its log under --namespace-keys
	eng := engine.New(sealed, engine.Config{})
	opts.LogSeals = true
	_, err = Run(ctx, s.js, eng, sealed, opts)
	require.NoError(t, err)
	got, _, err := eng.Read(ctx, keyOf(key), 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conv), string(got))

	stream, err := s.js.Stream(ctx, "CP_LOG")
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	entries := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		require.NoError(t, err)
		require.NotContains(t, string(m.Data), secret, "message %d (%s)", seq, m.Subject)
		require.NotContains(t, string(m.Data), writer, "message %d (%s)", seq, m.Subject)
		if strings.HasPrefix(m.Subject, "cp.log.secret.") || strings.HasPrefix(m.Subject, "cp.val.secret.") {
			require.True(t, sealing.IsEnvelope(m.Data), "message %d (%s) is sealed", seq, m.Subject)
			entries++
		}
	}
	require.Positive(t, entries, "the session's entries were found on the stream")
}

// Conversations larger than an entry (the 2.3 MB corpus, JetStream's default 1 MiB max_payload):
// format 2 stored them in chunks, the engine writes them as parts, and every version reads back
// byte for byte, with its record's hash.
func TestRun_LargeConversation(t *testing.T) {
	ctx := context.Background()
	raw, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	require.NoError(t, err)
	c, err := codec.Parse(raw)
	require.NoError(t, err)
	s := open(t, t.TempDir())
	st, err := kvstore.OpenStore(ctx, s.js, kvstore.StoreConfig{Replicas: 1, ChunkSize: 64 << 10})
	require.NoError(t, err)
	key := snapshot.Key{Namespace: "big", Session: "pi", Agent: "main"}
	n := len(c.Messages)
	var want [][]byte
	for i, cut := range []int{n * 6 / 10, n * 8 / 10, n} {
		conv := append(append([]byte{'['}, c.Span(0, cut)...), ']')
		_, err := snapshot.Save(ctx, st, snapshot.SaveRequest{Key: key, SaveID: fmt.Sprint(i), Payload: conv, Now: time.Now()})
		require.NoError(t, err)
		want = append(want, conv)
	}
	require.Greater(t, len(want[0]), int(s.nc.MaxPayload()), "the first version is larger than an entry")

	_, err = Run(ctx, s.js, s.eng, s.log, testOptions())
	require.NoError(t, err)
	s = s.reopen(t)
	for i, w := range want {
		got, rec, err := s.eng.Read(ctx, keyOf(key), uint64(i+1), engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		require.Equal(t, len(w), len(got))
		require.True(t, bytes.Equal(w, got), "version %d", i+1)
		require.Equal(t, uint64(i+1), rec.Version)
	}
}

// The comparison after an upgrade ignores a record's storedBytes and gen, and nothing else: a
// manifest changed in either still matches, changed in any other field does not.
func TestCompareFormat2Upgraded_IgnoresOnlyStorageFacts(t *testing.T) {
	ctx := context.Background()
	s := open(t, unpack(t, "store.tar.gz"))
	_, err := Run(ctx, s.js, s.eng, s.log, testOptions())
	require.NoError(t, err)
	m, err := testenv.ReadFormat2Manifest(filepath.Join(fixtureDir, "manifest.json"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		change func(v *checkpoint.Version)
		same   bool
	}{
		{"storedBytes", func(v *checkpoint.Version) { v.StoredBytes += 1000 }, true},
		{"gen", func(v *checkpoint.Version) { v.Gen += 7 }, true},
		{"parent", func(v *checkpoint.Version) { v.Parent++ }, false},
		{"created", func(v *checkpoint.Version) { v.Created = v.Created.Add(time.Nanosecond) }, false},
		{"writer", func(v *checkpoint.Version) { v.Writer += "x" }, false},
		{"reason", func(v *checkpoint.Version) { v.Reason = "fork" }, false},
		{"saveId", func(v *checkpoint.Version) { v.SaveID += "x" }, false},
		{"rawBytes", func(v *checkpoint.Version) { v.RawBytes++ }, false},
		{"counts", func(v *checkpoint.Version) { v.Counts.ToolCalls++ }, false},
		{"dialect", func(v *checkpoint.Version) { v.Dialect = "anthropic" }, false},
		{"format", func(v *checkpoint.Version) { v.Format++ }, false},
		{"origin", func(v *checkpoint.Version) { v.Origin = &wire.Origin{Via: "import"} }, false},
		{"forkOf", func(v *checkpoint.Version) { v.ForkOf = &wire.ForkRef{Key: v.Key, Version: 1} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var changed testenv.Format2Manifest
			b, err := json.Marshal(m)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &changed))
			tc.change(&changed.Sessions[0].Versions[1].Record)
			err = testenv.CompareFormat2Upgraded(ctx, engineServed{s.eng}, changed)
			if tc.same {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, "version 2 record")
			}
		})
	}
}

// Without cp_heads and without "done", the store is not one format 2 left: Run refuses and
// changes nothing.
func TestRun_HeadsBucketMissing(t *testing.T) {
	ctx := context.Background()
	s := open(t, unpack(t, "store.tar.gz"))
	require.NoError(t, s.js.DeleteKeyValue(ctx, wire.BucketHeads))
	_, err := Run(ctx, s.js, s.eng, s.log, testOptions())
	require.ErrorContains(t, err, "without cp_heads")
	present, err := presentBuckets(ctx, s.js)
	require.NoError(t, err)
	require.Equal(t, Buckets[1:], present)
	namespaces, err := s.log.Namespaces(ctx)
	require.NoError(t, err)
	require.Empty(t, namespaces)
}

// A record the log engine cannot hold (format 2 took a writer header of any length; an entry's
// strings are at most 4 KiB) stops the upgrade with an error naming the session and version, before
// "done": format 2 stays whole, and the daemon does not serve a store missing that version.
func TestRun_RecordTheEngineCannotHold(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	st, err := kvstore.OpenStore(ctx, s.js, kvstore.StoreConfig{Replicas: 1, ChunkSize: 64 << 10})
	require.NoError(t, err)
	key := snapshot.Key{Namespace: "team", Session: "long-writer", Agent: "main"}
	_, err = snapshot.Save(ctx, st, snapshot.SaveRequest{Key: key, SaveID: "1", Writer: strings.Repeat("w", 5000), Now: time.Now(),
		Payload: []byte(`[{"role":"user","content":[{"type":"text","text":"hi"}]}]`)})
	require.NoError(t, err)
	_, err = Run(ctx, s.js, s.eng, s.log, testOptions())
	require.ErrorIs(t, err, engine.ErrBadRequest)
	require.ErrorContains(t, err, `session "team/long-writer/main": copying version 1`)
	present, err := presentBuckets(ctx, s.js)
	require.NoError(t, err)
	require.Equal(t, Buckets, present)
}

// A daemon that finds "done" and all five buckets checks format 2 before deleting; if another
// daemon that finished the upgrade deletes cp_heads meanwhile, the check says so (ErrInProgress:
// the caller retries, and then deletes what is left), and creates no bucket again.
func TestRun_BucketsDeletedDuringTheCheck(t *testing.T) {
	ctx := context.Background()
	s, _ := reviewStore(t)
	opts := testOptions()
	opts.step = func(_ int, what string) error {
		if what == "marker done" {
			return errKilled
		}
		return nil
	}
	_, err := Run(ctx, s.js, s.eng, s.log, opts)
	require.ErrorIs(t, err, errKilled)

	u := &upgrader{js: s.js, eng: s.eng, log: s.log, opts: testOptions().withDefaults()}
	require.NoError(t, s.js.DeleteKeyValue(ctx, wire.BucketHeads)) // the other daemon's first deletion
	err = u.checkUnchanged(ctx, time.Now())
	require.ErrorIs(t, err, ErrInProgress)
	present, err := presentBuckets(ctx, s.js)
	require.NoError(t, err)
	require.Equal(t, Buckets[1:], present, "the check creates no bucket")

	rep, err := Run(ctx, s.js, s.eng, s.log, testOptions()) // the retry
	require.NoError(t, err)
	require.Equal(t, Buckets[1:], rep.BucketsDeleted)
}
