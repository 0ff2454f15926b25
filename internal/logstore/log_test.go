package logstore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/logtest"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// freshLog returns a function for logtest.Run that gives each case an empty stream on nc: the
// stream is purged (sequences go on from the last case's). Deleting it and creating it again at
// once is not an option: on nats-server 2.15.2 the new stream sometimes came back with messages of
// the deleted one, or failed with "error creating store for stream".
func freshLog(nc *nats.Conn, cfg LogConfig) func(t *testing.T) engine.Log {
	return func(t *testing.T) engine.Log {
		t.Helper()
		return openFresh(t, nc, cfg)
	}
}

func openFresh(t *testing.T, nc *nats.Conn, cfg LogConfig) *Log {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var l *Log
	var err error
	for { // a cluster just started may not have placed its peers yet ("peer offline")
		if l, err = OpenLog(ctx, nc, cfg); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err)
	require.NoError(t, l.stream.Purge(ctx))
	return l
}

// suiteOptions are the conformance suite's options for logs opened with cfg: the other log is
// opened through a connection to otherURL (another daemon; on a cluster, another node); a full
// store is the stream's max_bytes.
func suiteOptions(otherURL string, cfg LogConfig) logtest.Options {
	return logtest.Options{
		Other: func(t *testing.T, _ engine.Log) engine.Log {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			other, err := OpenLog(ctx, connect(t, otherURL), cfg)
			require.NoError(t, err)
			return other
		},
		Fill: func(t *testing.T, l engine.Log, free int) func() {
			ll := l.(*Log)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			js, err := jetstream.New(ll.nc)
			require.NoError(t, err)
			info, err := ll.stream.Info(ctx)
			require.NoError(t, err)
			full := LogStreamConfig(ll.cfg)
			full.MaxBytes = int64(info.State.Bytes) + int64(free)
			_, err = js.UpdateStream(ctx, full)
			require.NoError(t, err)
			return func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := js.UpdateStream(ctx, LogStreamConfig(ll.cfg))
				require.NoError(t, err)
			}
		},
	}
}

// The JetStream log passes the conformance suite on the embedded server (nats-server of go.mod).
func TestLog_Conformance(t *testing.T) {
	nc, _ := startServer(t)
	logtest.Run(t, freshLog(nc, LogConfig{}), suiteOptions(nc.ConnectedUrl(), LogConfig{}))
}

// … on Debian's nats-server 2.9.10 (no batched direct gets: entries are read one by one).
func TestLog_ConformanceOldNATS(t *testing.T) {
	bin := oldNATS(t)
	url := startProcess(t, bin)
	nc := connect(t, url)
	require.False(t, serverAtLeast(nc, 2, 11))
	logtest.Run(t, freshLog(nc, LogConfig{}), suiteOptions(url, LogConfig{}))
}

// Ids that are not ids (empty, too long, not UTF-8) are refused with wire.ErrInvalidID, naming
// the part, and nothing is written.
func TestLog_InvalidIDs(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	ctx := context.Background()
	long := strings.Repeat("x", wire.MaxIDBytes+1)
	for _, k := range []engine.Key{
		{Namespace: "", Session: "s", Agent: "a"},
		{Namespace: "n", Session: "", Agent: "a"},
		{Namespace: "n", Session: "s", Agent: ""},
		{Namespace: long, Session: "s", Agent: "a"},
		{Namespace: "n", Session: "\xff", Agent: "a"},
	} {
		_, err := l.Append(ctx, k, []byte("x"), 0)
		require.ErrorIs(t, err, wire.ErrInvalidID, "%q", k)
		_, err = l.Last(ctx, k)
		require.ErrorIs(t, err, wire.ErrInvalidID)
		_, err = l.Lasts(ctx, []engine.Key{{Namespace: "n", Session: "s", Agent: "a"}, k})
		require.ErrorIs(t, err, wire.ErrInvalidID, "one invalid key fails the whole call")
		_, err = l.Get(ctx, k, 1)
		require.ErrorIs(t, err, wire.ErrInvalidID)
		require.ErrorIs(t, l.Range(ctx, k, 0, 0, func(engine.Entry) bool { return true }), wire.ErrInvalidID)
		require.ErrorIs(t, l.Delete(ctx, k, 1), wire.ErrInvalidID)
		require.ErrorIs(t, l.Purge(ctx, k), wire.ErrInvalidID)
	}
	for _, ns := range []string{"", long, "\xff"} {
		_, _, err := l.Sessions(ctx, ns, 0, 10)
		require.ErrorIs(t, err, wire.ErrInvalidID)
		require.ErrorIs(t, l.Values(ctx, ns, func(string) bool { return true }), wire.ErrInvalidID)
	}
	for _, id := range []string{"", long, "\xfe"} {
		require.ErrorIs(t, l.PutValue(ctx, "n", id, []byte("v")), wire.ErrInvalidID)
		_, err := l.Value(ctx, "n", id)
		require.ErrorIs(t, err, wire.ErrInvalidID)
		require.ErrorIs(t, l.DeleteValue(ctx, "n", id), wire.ErrInvalidID)
	}
	info, err := l.stream.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "nothing was written")
}

// Whatever the ids, every subject written has the shape docs/format.md §8.2 gives it: cp.log and
// three tokens, cp.idx and one, cp.val and two, each token of the encoded alphabet only.
func TestLog_SubjectsKeepTheirShape(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	ctx := context.Background()
	hostile := []string{".", "*", ">", "a.b", " ", "ü", "=2E", "$JS.API", strings.Repeat(".", 256)}
	for i, id := range hostile {
		next := hostile[(i+1)%len(hostile)]
		_, err := l.Append(ctx, engine.Key{Namespace: id, Session: next, Agent: id}, []byte("e"), 0)
		require.NoError(t, err)
		require.NoError(t, l.PutValue(ctx, next, id, []byte("v")))
	}
	info, err := l.stream.Info(ctx, jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	require.Len(t, info.State.Subjects, 3*len(hostile))
	tokens := map[string]int{"log": 3, "idx": 1, "val": 2}
	for s := range info.State.Subjects {
		parts := strings.Split(s, ".")
		require.Equal(t, "cp", parts[0], s)
		require.Equal(t, tokens[parts[1]], len(parts)-2, "%s has the tokens of a %s subject", s, parts[1])
		for _, p := range parts[2:] {
			_, err := wire.DecodeID(p)
			require.NoError(t, err, "token %q of %s", p, s)
		}
	}
}

// A creation that loses its compare-and-swap leaves no index entry behind (it deletes its own),
// so the stream holds exactly the winner's two messages.
func TestLog_LostCreationLeavesNoIndexEntry(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	ctx := context.Background()
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	_, err := l.Append(ctx, k, []byte("first"), 0)
	require.NoError(t, err)
	_, err = l.Append(ctx, k, []byte("stale creation"), 0)
	require.ErrorIs(t, err, engine.ErrConflict)
	info, err := l.stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), info.State.Msgs, "the log's entry and one index entry")
}

// An index entry that logstore did not write (published raw by anything with the stream's
// rights) fails the listing with a typed error naming it; it is never guessed at, and the
// sessions themselves are untouched.
func TestLog_MalformedIndexEntry(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	ctx := context.Background()
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	seq, err := l.Append(ctx, k, []byte("e"), 0)
	require.NoError(t, err)
	for _, bad := range []string{"no-dot", "a.b.c", "a b.c", "=2e.x", "=41.x", ""} {
		ack, err := l.nc.Request("cp.idx.n", []byte(bad), 5*time.Second)
		require.NoError(t, err)
		_, _, err = l.Sessions(ctx, "n", 0, 10)
		require.ErrorIs(t, err, wire.ErrInvalidID, "%q", bad)
		require.ErrorContains(t, err, "index entry")
		var pub struct {
			Seq uint64 `json:"seq"`
		}
		require.NoError(t, apiReply(ack, &pub))
		require.NoError(t, l.deleteSeqs(ctx, []uint64{pub.Seq}))
	}
	keys, _, err := l.Sessions(ctx, "n", 0, 10)
	require.NoError(t, err)
	require.Equal(t, []engine.Key{k}, keys)
	last, err := l.Last(ctx, k)
	require.NoError(t, err)
	require.Equal(t, seq, last.Seq)
}

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

// startProcess runs bin with JetStream on a temp dir and a free port, and returns its URL.
func startProcess(t testing.TB, bin string) string {
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

// oldNATS returns the path of a nats-server binary older than 2.11 (Debian's 2.9.10), or skips.
func oldNATS(t testing.TB) string {
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
	return bin
}

// When no server answers for the stream (an election without a leader, a restart, or here a
// stream deleted under the daemon), reads and writes fail with ErrUnavailable, which the engine
// and the daemon tell apart from a real failure (the client may retry).
func TestLog_NoStreamIsUnavailable(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	ctx := context.Background()
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	seq, err := l.Append(ctx, k, []byte("e"), 0)
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(ctx, StreamOf(LogConfig{})))

	_, err = l.Last(ctx, k)
	require.ErrorIs(t, err, ErrUnavailable, "a direct get nobody answers")
	require.ErrorIs(t, l.Range(ctx, k, 0, 0, func(engine.Entry) bool { return true }), ErrUnavailable)
	_, err = l.Append(ctx, k, []byte("e"), seq)
	require.ErrorIs(t, err, ErrUnavailable, "a publish nobody stores")
	require.NotErrorIs(t, err, engine.ErrConflict)
}

// Ids a client chose reach error messages quoted: no control character or invalid UTF-8 of
// theirs is written raw into the daemon's logs.
func TestLog_IDsQuotedInErrors(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	ctx := context.Background()
	k := engine.Key{Namespace: "n\x1b[31m\nforged log line", Session: "\xff", Agent: "a"}
	_, err := l.Append(ctx, k, []byte("x"), 0)
	require.ErrorIs(t, err, wire.ErrInvalidID)
	require.True(t, utf8.ValidString(err.Error()), "%q", err.Error())
	require.NotContains(t, err.Error(), "\x1b")
	require.NotContains(t, err.Error(), "\n")
}

// A clustered stream's 10164 ("wrong last sequence" without the last sequence: the subject has a
// write in process) is not a lost compare-and-swap by itself: publish asks the leader, and only
// its answer that the subject moved on makes an ErrConflict. Were 10164 a conflict already, an
// unanswered leader read or an expired context would report one, and PutValue would report a
// value stored that is not (review finding 6).
func TestLog_InProcessIsNotAConflict(t *testing.T) {
	err := (&apiError{Code: 400, ErrCode: errCodeWrongLastSequenceClustered, Description: "wrong last sequence"}).mapped()
	require.ErrorIs(t, err, errInProcess)
	require.NotErrorIs(t, err, engine.ErrConflict)
}

// A key with two index entries (a creation that timed out and was tried again keeps its first,
// engine.Log allows it) is listed once in a page.
func TestLog_KeyWithTwoIndexEntriesListedOncePerPage(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	ctx := context.Background()
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	other := engine.Key{Namespace: "n", Session: "t", Agent: "a"}
	_, err := l.Append(ctx, k, []byte("e"), 0)
	require.NoError(t, err)
	_, err = l.Append(ctx, other, []byte("e"), 0)
	require.NoError(t, err)
	idx, err := indexSubject("n")
	require.NoError(t, err)
	_, err = l.publish(ctx, idx, []byte(indexToken(k)), anyLastSeq, nil)
	require.NoError(t, err)
	keys, next, err := l.Sessions(ctx, "n", 0, 10)
	require.NoError(t, err)
	require.Equal(t, []engine.Key{k, other}, keys)
	require.Zero(t, next)
}

// A Purge of an empty log deletes the index entries a crashed creation left (its index entry
// written, never its first entry) once they are older than the grace a creation under way has;
// younger ones stay (TestLog_PurgeOfEmptyLogKeepsACreationUnderWay).
func TestLog_PurgeOfEmptyLogDeletesOldLeftovers(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	ctx := context.Background()
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	idx, err := indexSubject(k.Namespace)
	require.NoError(t, err)
	_, err = l.publish(ctx, idx, []byte(indexToken(k)), anyLastSeq, nil) // a creation that crashed
	require.NoError(t, err)

	require.NoError(t, l.Purge(ctx, k))
	keys, _, err := l.Sessions(ctx, "n", 0, 10)
	require.NoError(t, err)
	require.Equal(t, []engine.Key{k}, keys, "young: it may be a creation under way")

	l.indexGrace = time.Nanosecond                                                                   // as if the grace had passed
	_, err = l.Append(ctx, engine.Key{Namespace: "m", Session: "x", Agent: "a"}, []byte("later"), 0) // the stream's time moves on
	require.NoError(t, err)
	require.NoError(t, l.Purge(ctx, k))
	keys, _, err = l.Sessions(ctx, "n", 0, 10)
	require.NoError(t, err)
	require.Empty(t, keys, "old: a crash's leftover, deleted")
}
