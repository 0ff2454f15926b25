package logstore

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// startServer runs an embedded nats-server as the daemon does, and connects to it.
func startServer(t testing.TB) (*nats.Conn, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := startEmbedded(dir)
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
		_, err = st.Pack(ctx, k, false) // as the daemon does after answering
		require.NoError(t, err, "packing after the save of message %d", i)
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

func TestStore_SaveRestore(t *testing.T) {
	nc, _ := startServer(t)
	st := open(t, nc, Config{PackEntries: 8})
	k := wire.Key{Namespace: "team", Session: "s.1 *", Agent: "main"}
	saveTurns(t, st, k, 0, 140) // 70 versions, one entry each
	checkVersions(t, st, k, 70)

	// A daemon that restarts reads the head from the stream; its next save starts a new frame.
	st.Forget()
	checkVersions(t, st, k, 70)
	saveTurns(t, st, k, 140, 160)
	st.Forget()
	checkVersions(t, st, k, 80)

	// Every 8 entries were packed into one, and the packed ones deleted: 80 saves and a restart
	// (whose first save started a new frame) leave 10 packs.
	info, err := st.stream.Info(context.Background(), jetstream.WithSubjectFilter(LogSubject(k)))
	require.NoError(t, err)
	require.Equal(t, uint64(10), info.State.Msgs)

	history, err := st.History(context.Background(), k)
	require.NoError(t, err)
	require.Len(t, history, 80)
	for i, rec := range history {
		require.Equal(t, uint64(i+1), rec.Version)
		require.Equal(t, fmt.Sprintf("save-%d", 2*i), rec.SaveID)
		require.Equal(t, 2*(i+1), rec.Messages)
	}

	// A save delivered again is answered with its version (here from the pack), writes nothing.
	rec, err := st.Save(context.Background(), SaveRequest{Key: k, SaveID: "save-158", Messages: [][]byte{message(158)}})
	require.NoError(t, err)
	require.Equal(t, uint64(80), rec.Version)
	_, _, err = st.Restore(context.Background(), k, 81)
	require.ErrorIs(t, err, ErrNoVersion)
}

// FastSaves compresses saves at zstd.SpeedFastest: every version reads back as saved, across
// packs and a restart (a new frame), and the stream is not the default level's.
func TestStore_FastSaves(t *testing.T) {
	nc, _ := startServer(t)
	ctx := context.Background()
	fast := open(t, nc, Config{PackEntries: 8, FastSaves: true})
	k := wire.Key{Namespace: "team", Session: "fast", Agent: "main"}
	saveTurns(t, fast, k, 0, 40)
	fast.Forget()
	saveTurns(t, fast, k, 40, 60)
	checkVersions(t, fast, k, 30)

	// The same saves, unpacked, at each level: the stored streams differ.
	tail := func(cfg Config, session string) int64 {
		st, k := open(t, nc, cfg), wire.Key{Namespace: "team", Session: session, Agent: "main"}
		saveTurns(t, st, k, 0, 60)
		sess, err := st.session(ctx, k)
		require.NoError(t, err)
		return sess.last.Head.TailBytes
	}
	require.NotEqual(t, tail(Config{NoPack: true}, "default"), tail(Config{NoPack: true, FastSaves: true}, "fast-nopack"),
		"saves at SpeedFastest stored the default level's bytes")
}

// A rewrite keeps a prefix of the head and adds other messages: the new head has them, and every
// older version still reads as it was saved.
func TestStore_Rewrite(t *testing.T) {
	nc, _ := startServer(t)
	st := open(t, nc, Config{})
	ctx := context.Background()
	k := wire.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, st, k, 0, 20) // versions 1..10
	kept := conversation(6)    // the first 6 messages, then two others
	other := [][]byte{[]byte(`{"role":"user","content":"edited"}`), []byte(`{"role":"assistant","content":"again"}`)}
	rec, err := st.Save(ctx, SaveRequest{Key: k, SaveID: "rw", Messages: other,
		Keep: &Kept{Messages: 6, RawBytes: int64(len(kept) - 2)}})
	require.NoError(t, err)
	require.Equal(t, uint64(11), rec.Version)
	require.Equal(t, 8, rec.Messages)
	want := string(kept[:len(kept)-1]) + "," + string(other[0]) + "," + string(other[1]) + "]"

	for _, cold := range []bool{false, true} {
		if cold {
			st.Forget()
		}
		got, _, err := st.Restore(ctx, k, 0)
		require.NoError(t, err)
		require.Equal(t, want, string(got))
		got, _, err = st.Restore(ctx, k, 10)
		require.NoError(t, err)
		require.Equal(t, string(conversation(20)), string(got))
	}
	// Appends go on from the rewritten head.
	_, err = st.Save(ctx, SaveRequest{Key: k, SaveID: "after", Messages: [][]byte{message(99)}})
	require.NoError(t, err)
	got, _, err := st.Restore(ctx, k, 0)
	require.NoError(t, err)
	require.Equal(t, want[:len(want)-1]+","+string(message(99))+"]", string(got))

	// The same save delivered again is answered with its version, and writes nothing.
	rec, err = st.Save(ctx, SaveRequest{Key: k, SaveID: "after", Messages: [][]byte{message(99)}})
	require.NoError(t, err)
	require.Equal(t, uint64(12), rec.Version)
}

// Without packs every save stays an entry; with them, a crash between a pack's commit and the
// deletion of what it packed leaves entries that readers skip and the next pack deletes.
func TestStore_Pack(t *testing.T) {
	nc, _ := startServer(t)
	k := wire.Key{Namespace: "n", Session: "s", Agent: "a"}
	for _, openPacks := range []bool{false, true} {
		t.Run(fmt.Sprintf("open=%v", openPacks), func(t *testing.T) { testPack(t, nc, k, openPacks) })
	}
}

func testPack(t *testing.T, nc *nats.Conn, k wire.Key, openPacks bool) {
	entries := func(st *Store) uint64 {
		info, err := st.stream.Info(context.Background(), jetstream.WithSubjectFilter(LogSubject(k)))
		require.NoError(t, err)
		return info.State.Subjects[LogSubject(k)]
	}
	k.Session += fmt.Sprint(openPacks)
	none := open(t, nc, Config{NoPack: true})
	saveTurns(t, none, k, 0, 40)
	require.Equal(t, uint64(20), entries(none))
	checkVersions(t, none, k, 20)

	st := open(t, nc, Config{PackEntries: 6, PackOpen: openPacks})
	st.crashBeforeDeletes = true
	saveTurns(t, st, k, 40, 44) // 22 entries: packed, none deleted
	require.Equal(t, uint64(23), entries(st))
	st.Forget()
	checkVersions(t, st, k, 22)
	history, err := st.History(context.Background(), k)
	require.NoError(t, err)
	require.Len(t, history, 22)

	st.crashBeforeDeletes = false
	saveTurns(t, st, k, 44, 56) // 6 more saves: packed; they and the 21 left deleted
	require.Equal(t, uint64(3), entries(st), "two packs and the last save")
	checkVersions(t, st, k, 28)

	// A rewrite inside a pack: old versions keep their bytes, the head has the rewrite.
	kept := conversation(4)
	_, err = st.Save(context.Background(), SaveRequest{Key: k, SaveID: "rw", Messages: [][]byte{message(100)},
		Keep: &Kept{Messages: 4, RawBytes: int64(len(kept) - 2)}})
	require.NoError(t, err)
	_, err = st.Pack(context.Background(), k, true)
	require.NoError(t, err)
	st.Forget()
	got, _, err := st.Restore(context.Background(), k, 0)
	require.NoError(t, err)
	require.Equal(t, string(kept[:len(kept)-1])+","+string(message(100))+"]", string(got))
	for _, v := range []int{1, 21, 22, 27, 28} {
		got, _, err := st.Restore(context.Background(), k, uint64(v))
		require.NoError(t, err)
		require.Equal(t, string(conversation(2*v)), string(got), "version %d", v)
	}
}

// Two daemons on one stream: each one's cache goes stale when the other saves; the
// compare-and-swap catches it and the save is made again on the real head.
func TestStore_CompareAndSwap(t *testing.T) {
	nc, _ := startServer(t)
	a, b := open(t, nc, Config{}), open(t, nc, Config{})
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
	st := open(t, nc, Config{})
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

	// The fork goes on on its own (message 34 onwards, as the source did).
	saveTurns(t, st, dst, 34, 60)
	st.Forget()
	got, _, err = st.Restore(ctx, dst, 0)
	require.NoError(t, err)
	require.Equal(t, string(conversation(60)), string(got))
	got, _, err = st.Restore(ctx, dst, 1)
	require.NoError(t, err)
	require.Equal(t, string(conversation(34)), string(got))
}

// Bad stored bytes are refused with ErrMalformed, never a panic; every entry reads back as written.
func TestDecodeEntry(t *testing.T) {
	state, _, err := extendHash(nil, []byte("x"))
	require.NoError(t, err)
	keep := int64(7)
	entries := map[string]struct {
		kind Kind
		meta Meta
		data string
	}{
		"save": {KindSave, Meta{Head: Head{Version: 3, Messages: 9, RawBytes: 1234, State: state}, SaveID: "id-3", Time: 1700000000000,
			Piece: &Piece{Messages: 2, RawBytes: 300, Frame: true}}, "zstd bytes"},
		"rewrite with lease": {KindSave, Meta{Head: Head{Version: 4, Messages: 1, RawBytes: 10, State: state,
			Lease: &Lease{Owner: "host-a", Epoch: 2, Expires: 1700000009999}}, SaveID: "id-4", Time: 1, Piece: &Piece{Messages: 1, RawBytes: 3, Keep: &keep}}, "z"},
		"lease": {KindLease, Meta{Head: Head{Version: 4, State: state, Lease: &Lease{Owner: "o", Epoch: 1, Expires: 5}}}, ""},
		"fork":  {KindFork, Meta{Head: Head{Version: 1, State: state}, SaveID: "f", Time: 2, Fork: &Fork{Subject: "cp.log.a.b.c", UpTo: 77, Version: 5, RawBytes: 99}}, ""},
		"open pack": {KindPack, Meta{Head: Head{Version: 9, Messages: 20, RawBytes: 999, State: state, Pack: 12}, Open: true,
			Packed: []Packed{{Record: Record{Version: 8, SaveID: "a", Time: 3, Messages: 18, RawBytes: 900, Hash: strings.Repeat("ab", 32)},
				Piece: Piece{RawBytes: 50, Frame: true}}, {Record: Record{Version: 9, SaveID: "b", Time: 4, Messages: 20,
				RawBytes: 1001, Hash: strings.Repeat("cd", 32)}, Piece: Piece{RawBytes: 99, Keep: &keep}}}}, "frames"},
	}
	for name, e := range entries {
		b, err := encodeEntry(e.kind, e.meta, []byte(e.data))
		require.NoError(t, err, name)
		k, meta, data, err := decodeEntry(b)
		require.NoError(t, err, name)
		require.Equal(t, e.kind, k, name)
		require.Equal(t, e.meta, meta, name)
		require.Equal(t, e.data, string(data), name)
		// Every cut of it is refused, or (cut inside the data of a save) reads as shorter data.
		for n := range len(b) - len(e.data) {
			_, _, _, err := decodeEntry(b[:n])
			require.ErrorIs(t, err, ErrMalformed, "%s cut to %d bytes", name, n)
		}
	}
	save, err := encodeEntry(KindSave, entries["save"].meta, nil)
	require.NoError(t, err)
	for name, b := range map[string][]byte{
		"empty": nil, "bad magic": append([]byte("CPKT"), save[4:]...), "unknown kind": append([]byte("CPL1\x09"), save[5:]...),
		"unknown flag": append([]byte("CPL1\x01\x80"), save[6:]...), "frame flag on a lease": append([]byte("CPL1\x02\x01"), save[6:]...),
		"huge version":    append([]byte("CPL1\x01\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), save[7:]...),
		"lease with data": append(mustEntry(t, KindLease, entries["lease"].meta), 'x'),
	} {
		_, _, _, err := decodeEntry(b)
		require.ErrorIs(t, err, ErrMalformed, name)
	}
	_, err = encodeEntry(KindSave, Meta{Piece: &Piece{}}, nil)
	require.Error(t, err, "an entry without a hash state is not written")
}

func mustEntry(t *testing.T, k Kind, m Meta) []byte {
	b, err := encodeEntry(k, m, nil)
	require.NoError(t, err)
	return b
}

// The engine runs on Debian's nats-server 2.9.10 (the oldest single server checkpointd supports):
// direct get (last_by_subj, seq, next_by_subj) and Nats-Expected-Last-Subject-Sequence exist
// there; batched direct gets do not (2.11), so reads go entry by entry.
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
	st := open(t, nc, Config{PackEntries: 8})
	require.False(t, st.batch, "2.9 has no batched direct get: entries are read one by one")
	k := wire.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, st, k, 0, 80) // packs, and deletes what they packed
	st.Forget()
	checkVersions(t, st, k, 40)
	info, err := st.stream.Info(context.Background(), jetstream.WithSubjectFilter(LogSubject(k)))
	require.NoError(t, err)
	require.Equal(t, uint64(5), info.State.Subjects[LogSubject(k)])
	_, err = st.publish(context.Background(), LogSubject(k), []byte("x"), 1)
	require.ErrorIs(t, err, ErrConflict)
	_, err = st.TakeLease(context.Background(), k, "me", time.Minute)
	require.NoError(t, err)
	checkVersions(t, st, k, 40)
	// Purge by subject below a sequence (what deleting a session uses) exists there too.
	sess, err := st.session(context.Background(), k)
	require.NoError(t, err)
	require.NoError(t, st.stream.Purge(context.Background(), jetstream.WithPurgeSubject(LogSubject(k)),
		jetstream.WithPurgeSequence(sess.lastSeq)))
	info, err = st.stream.Info(context.Background(), jetstream.WithSubjectFilter(LogSubject(k)))
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Subjects[LogSubject(k)])
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

// A piece whose bytes do not match its CRC-32C is refused, in a run decoded in place or not.
func TestLogBuilder_CRC(t *testing.T) {
	enc, err := newEncoder(1 << 20)
	require.NoError(t, err)
	var pieces []*Piece
	var datas [][]byte
	for i := range 3 {
		raw := joinMessages([][]byte{message(i)}, i > 0)
		data, err := enc.add(raw)
		require.NoError(t, err)
		pieces = append(pieces, &Piece{Messages: 1, RawBytes: int64(len(raw)), CRC: crc32.Checksum(raw, castagnoli), Frame: i == 0})
		datas = append(datas, append([]byte(nil), data...))
	}
	build := func(capacity int) ([]byte, error) {
		lb := logBuilder{out: append(make([]byte, 0, capacity), '[')}
		for i := range pieces {
			if err := lb.add(pieces[i], datas[i]); err != nil {
				return nil, err
			}
		}
		return lb.result()
	}
	want := string(conversation(3))
	for _, capacity := range []int{len(want), 1} { // room to decode in place, or not
		got, err := build(capacity)
		require.NoError(t, err)
		require.Equal(t, want[:len(want)-1], string(got))
		pieces[1].CRC++
		_, err = build(capacity)
		require.ErrorIs(t, err, ErrMalformed)
		pieces[1].CRC--
	}
}
