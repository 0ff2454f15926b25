package logstore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// startServer runs an embedded nats-server as the daemon does, and connects to it.
func startServer(t testing.TB) (*nats.Conn, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := transfer.StartServer(transfer.ServerConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return connect(t, s.ClientURL()), dir
}

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func open(t testing.TB, nc *nats.Conn, cfg Config) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := Open(ctx, nc, cfg)
	require.NoError(t, err)
	return st
}

// message is a canonical message whose text names i, a little repetitive, as conversations are.
func message(i int) []byte {
	role := []string{"user", "assistant"}[i%2]
	return []byte(fmt.Sprintf(`{"role":%q,"content":[{"type":"text","text":"turn %d: %s"}]}`, role, i,
		strings.Repeat("the quick brown fox ", 1+i%7)))
}

// conversation is the JSON array of the first n messages.
func conversation(n int) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(message(i))
	}
	b.WriteByte(']')
	return b.Bytes()
}

// saveTurns saves messages from..to-1 two at a time (a user message and its answer).
func saveTurns(t testing.TB, st *Store, k wire.Key, from, to int) {
	t.Helper()
	ctx := context.Background()
	for i := from; i < to; i += 2 {
		msgs := [][]byte{message(i)}
		if i+1 < to {
			msgs = append(msgs, message(i+1))
		}
		_, err := st.Save(ctx, SaveRequest{Key: k, SaveID: fmt.Sprintf("save-%d", i), Messages: msgs})
		require.NoError(t, err, "saving messages from %d", i)
		_, err = st.Maintain(ctx, k)
		require.NoError(t, err, "merging after the save of message %d", i)
	}
}

// checkVersions restores the head and a spread of old versions (version v holds 2v messages).
func checkVersions(t testing.TB, st *Store, k wire.Key, versions int) {
	t.Helper()
	ctx := context.Background()
	got, rec, err := st.Restore(ctx, k, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(versions), rec.Version)
	require.Equal(t, string(conversation(2*versions)), string(got))
	for _, v := range []int{1, 2, 3, versions / 3, versions / 2, versions - 1} {
		if v < 1 {
			continue
		}
		got, rec, err := st.Restore(ctx, k, uint64(v))
		require.NoError(t, err, "version %d", v)
		require.Equal(t, uint64(v), rec.Version)
		require.Equal(t, string(conversation(2*v)), string(got), "version %d", v)
	}
}

func TestStore_SaveRestoreMerge(t *testing.T) {
	nc, _ := startServer(t)
	st := open(t, nc, Config{MergeFactor: 4})
	k := wire.Key{Namespace: "team", Session: "s.1 *", Agent: "main"}
	saveTurns(t, st, k, 0, 140) // 70 versions: merges up to level 3
	checkVersions(t, st, k, 70)

	// A daemon that restarts reads the head from the stream; its next save starts a new frame.
	st.Forget()
	checkVersions(t, st, k, 70)
	saveTurns(t, st, k, 140, 160)
	st.Forget()
	checkVersions(t, st, k, 80)

	// Merges purged what they superseded: the log subject holds its last entry and the saves
	// since the last merge; each level fewer than MergeFactor extents (plus one garbage at most).
	info, err := st.stream.Info(context.Background(), jetstream.WithSubjectFilter("cp.>"))
	require.NoError(t, err)
	require.LessOrEqual(t, info.State.Msgs, uint64(4*4), "entries left: %v", info.State.Subjects)
}

func TestStore_NoMerges(t *testing.T) {
	nc, _ := startServer(t)
	st := open(t, nc, Config{MergeFactor: -1})
	k := wire.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, st, k, 0, 40)
	checkVersions(t, st, k, 20)
}

// Two daemons on one stream: each one's cache goes stale when the other saves; the
// compare-and-swap catches it and the save is made again on the real head.
func TestStore_CompareAndSwap(t *testing.T) {
	nc, _ := startServer(t)
	a, b := open(t, nc, Config{MergeFactor: 4}), open(t, nc, Config{MergeFactor: 4})
	k := wire.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, a, k, 0, 10)
	saveTurns(t, b, k, 10, 20) // a's cache is stale from here
	saveTurns(t, a, k, 20, 30)
	checkVersions(t, b, k, 15)
	b.Forget()
	checkVersions(t, b, k, 15)

	// The raw compare-and-swap: an entry expecting a stale last sequence is refused.
	sess, err := a.session(context.Background(), k)
	require.NoError(t, err)
	_, err = a.publish(context.Background(), LogSubject(k), []byte("x"), int64(sess.lastSeq-1))
	require.ErrorIs(t, err, ErrConflict)
}

func TestStore_Lease(t *testing.T) {
	nc, _ := startServer(t)
	st := open(t, nc, Config{})
	ctx := context.Background()
	k := wire.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, st, k, 0, 4)
	l, err := st.TakeLease(ctx, k, "host-a", time.Minute)
	require.NoError(t, err)
	require.Equal(t, uint64(1), l.Epoch)

	_, err = st.Save(ctx, SaveRequest{Key: k, SaveID: "x", Messages: [][]byte{message(4)}, Owner: "host-b", Epoch: 1})
	require.ErrorIs(t, err, ErrFenced)
	_, err = st.TakeLease(ctx, k, "host-b", time.Minute)
	require.ErrorIs(t, err, ErrLeased)

	// Another daemon (cold cache) sees the lease in the head, and the owner's saves go through.
	other := open(t, nc, Config{})
	_, err = other.Save(ctx, SaveRequest{Key: k, SaveID: "y", Messages: [][]byte{message(4)}, Owner: "host-b", Epoch: 1})
	require.ErrorIs(t, err, ErrFenced)
	_, err = other.Save(ctx, SaveRequest{Key: k, SaveID: "z", Messages: [][]byte{message(4), message(5)}, Owner: "host-a", Epoch: 1})
	require.NoError(t, err)
	checkVersions(t, other, k, 3)
}

func TestStore_Fork(t *testing.T) {
	nc, _ := startServer(t)
	st := open(t, nc, Config{MergeFactor: 4})
	ctx := context.Background()
	src, dst := wire.Key{Namespace: "n", Session: "src", Agent: "a"}, wire.Key{Namespace: "n", Session: "dst", Agent: "a"}
	saveTurns(t, st, src, 0, 60)

	// A fork of an old version is one entry well under 1 KB, however large the conversation.
	before, err := st.stream.Info(ctx)
	require.NoError(t, err)
	rec, err := st.Fork(ctx, src, 17, dst, "fork-1")
	require.NoError(t, err)
	after, err := st.stream.Info(ctx)
	require.NoError(t, err)
	require.Less(t, after.State.Bytes-before.State.Bytes, uint64(1024))
	require.Equal(t, uint64(1), rec.Version)

	st.Forget()
	got, _, err := st.Restore(ctx, dst, 0)
	require.NoError(t, err)
	require.Equal(t, string(conversation(34)), string(got))

	// The fork goes on on its own (message 34 onwards, as the source did), and merges its own
	// extents, never the shared ones.
	saveTurns(t, st, dst, 34, 60)
	st.Forget()
	got, _, err = st.Restore(ctx, dst, 0)
	require.NoError(t, err)
	require.Equal(t, string(conversation(60)), string(got))
	got, _, err = st.Restore(ctx, dst, 1)
	require.NoError(t, err)
	require.Equal(t, string(conversation(34)), string(got))
}

// Bad stored bytes are refused with ErrMalformed, never a panic.
func TestDecodeEntry_Malformed(t *testing.T) {
	good, err := encodeEntry(KindSave, Meta{Head: &Head{Version: 1}}, []byte("data"))
	require.NoError(t, err)
	for name, b := range map[string][]byte{
		"empty": nil, "bad magic": []byte("CPKT\x01\x00"), "unknown kind": append([]byte("CPL1\x09"), good[5:]...),
		"meta too long": append([]byte("CPL1\x01\x7f"), good[6:]...), "no head": mustEntry(t, KindSave, Meta{}),
		"truncated": good[:8],
	} {
		_, _, _, err := decodeEntry(b)
		require.ErrorIs(t, err, ErrMalformed, name)
	}
	_, _, data, err := decodeEntry(good)
	require.NoError(t, err)
	require.Equal(t, "data", string(data))
}

func mustEntry(t *testing.T, k Kind, m Meta) []byte {
	b, err := encodeEntry(k, m, nil)
	require.NoError(t, err)
	return b
}

// The engine runs on a JetStream cluster (R3, nats-server of go.mod), with head reads from the
// stream leader.
func TestStore_Cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := testenv.StartCluster(t, 3)
	nc := connect(t, c.URLs())
	st := open(t, nc, Config{Replicas: 3, MergeFactor: 4, LeaderReads: true})
	k := wire.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, st, k, 0, 40)
	st.Forget()
	checkVersions(t, st, k, 20)
}

// The engine runs on Debian's nats-server 2.9.10 (the oldest single server checkpointd supports):
// direct get (last_by_subj, seq), Nats-Expected-Last-Subject-Sequence and purge by subject below
// a sequence all exist there.
func TestStore_OldNATS(t *testing.T) {
	bin := "/usr/sbin/nats-server"
	if p, err := exec.LookPath("nats-server"); err == nil {
		bin = p
	}
	if _, err := os.Stat(bin); err != nil || testing.Short() {
		t.Skip("no nats-server binary (apt-get install nats-server)")
	}
	out, err := exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	t.Logf("running against %s", strings.TrimSpace(string(out)))
	url := startProcess(t, bin)
	nc := connect(t, url)
	st := open(t, nc, Config{MergeFactor: 4})
	k := wire.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, st, k, 0, 80)
	st.Forget()
	checkVersions(t, st, k, 40)
	_, err = st.publish(context.Background(), LogSubject(k), []byte("x"), 1)
	require.ErrorIs(t, err, ErrConflict)
	info, err := st.stream.Info(context.Background())
	require.NoError(t, err)
	require.LessOrEqual(t, info.State.Msgs, uint64(16))
}

// startProcess runs bin with JetStream on a temp dir and a free port, and returns its URL.
func startProcess(t *testing.T, bin string) string {
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("listen: \"127.0.0.1:-1\"\nports_file_dir: %q\njetstream { store_dir: %q }\n", dir, filepath.Join(dir, "js"))), 0o600))
	cmd := exec.Command(bin, "-c", conf)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var url string
	require.Eventually(t, func() bool {
		matches, _ := filepath.Glob(filepath.Join(dir, "*.ports"))
		if len(matches) == 0 {
			return false
		}
		b, err := os.ReadFile(matches[0])
		if err != nil {
			return false
		}
		_, rest, ok := strings.Cut(string(b), `"nats":["`)
		url, _, _ = strings.Cut(rest, `"`)
		if !ok || url == "" {
			return false
		}
		nc, err := nats.Connect(url)
		if err != nil {
			return false
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		_, err = js.AccountInfo(context.Background())
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	return url
}
