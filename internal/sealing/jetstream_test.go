package sealing_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/logtest"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/sealing"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// startServer starts an embedded nats-server (random port, JetStream in a temp dir) and returns
// a connection to it, the server and its data directory.
func startServer(t testing.TB) (*nats.Conn, *server.Server, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := embedded.StartServer(embedded.ServerConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc, s, dir
}

// openLog opens the JetStream log (stream CP_LOG) on nc; fresh purges it first.
func openLog(t testing.TB, nc *nats.Conn, fresh bool) *logstore.Log {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := logstore.OpenLog(c, nc, logstore.LogConfig{})
	require.NoError(t, err)
	if fresh {
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		st, err := js.Stream(c, logstore.LogStreamConfig(logstore.LogConfig{}).Name)
		require.NoError(t, err)
		require.NoError(t, st.Purge(c))
	}
	return l
}

// The conformance suite passes through the decorator over the JetStream log, every namespace
// sealed.
func TestLog_ConformanceJetStream(t *testing.T) {
	nc, _, _ := startServer(t)
	keys := keysOf(t, map[string]any{"*": newKey()})
	newLog := func(t *testing.T) engine.Log { return sealing.NewLog(openLog(t, nc, true), keys) }
	logtest.Run(t, newLog)
	logtest.RunDataReader(t, newLog)
}

// markedConversation is n messages mentioning marker, the first and the last too, the last with
// an inline image (a base64 string the engine stores as a value).
func markedConversation(n int, marker string) []byte {
	image := make([]byte, 48<<10)
	_, _ = rand.Read(image)
	var msgs []string
	for i := range n {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"turn %d: %s %s"}`, i, marker, strings.Repeat("x", 300)))
	}
	msgs = append(msgs, `{"role":"toolResult","toolCallId":"t1","content":"`+marker+base64.StdEncoding.EncodeToString(image)+`"}`)
	return []byte("[" + strings.Join(msgs, ",") + "]")
}

// What the engine stores through the decorator for a namespace with a key never shows its bytes
// on disk: every entry and value of the JetStream log is an envelope, and no file of the data
// directory holds the namespace's markers, raw or zstd-decoded; a namespace without a key is
// stored as before, and the same search finds its markers (so the search works). Markers are
// written by the engine (saves, a pack, a value) and as raw entries and values.
func TestLog_JetStreamDataDirHoldsNoPlaintext(t *testing.T) {
	nc, s, dir := startServer(t)
	js := openLog(t, nc, false)
	l := sealing.NewLog(js, keysOf(t, map[string]any{"alice": newKey()}))
	e := engine.New(l, engine.Config{PackEntries: 3})
	markers := map[string][2]string{}
	for _, ns := range []string{"alice", "bob"} {
		raw := fmt.Sprintf("raw-marker-of-%s-%d", ns, time.Now().UnixNano())
		saved := fmt.Sprintf("saved-marker-of-%s-%d", ns, time.Now().UnixNano())
		markers[ns] = [2]string{raw, saved}
		writeMarked(t, l, ns, raw)
		k := engine.Key{Namespace: ns, Session: "conv", Agent: "main"}
		var convs [][]byte
		for v := 1; v <= 4; v++ {
			conv := markedConversation(v*2, saved)
			convs = append(convs, conv)
			r, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("save-", v), Payload: conv, Now: time.Now()})
			require.NoError(t, err)
			if r.PackDue {
				_, err := e.Pack(ctx, k, false)
				require.NoError(t, err)
			}
		}
		e.Forget()
		for v, want := range convs {
			got, _, err := e.Read(ctx, k, uint64(v+1), engine.ReadOptions{Verify: true})
			require.NoError(t, err, "%s version %d", ns, v+1)
			require.True(t, bytes.Equal(want, got), "%s version %d", ns, v+1)
		}
		inner := stored(t, js, ns)
		var values int
		for place, data := range inner {
			if strings.HasPrefix(place, "value ") {
				values++
			}
			require.Equal(t, ns == "alice", sealing.IsEnvelope(data), "%s", place)
		}
		require.Greater(t, values, 2, "the engine stored values too")
	}
	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()
	for _, m := range markers["alice"] {
		require.Empty(t, testenv.GrepDataDir(t, dir, m), "alice's %s is readable in the data directory", m)
	}
	for _, m := range markers["bob"] {
		require.NotEmpty(t, testenv.GrepDataDir(t, dir, m), "the search must find bob's %s, or it proves nothing", m)
	}
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// The engine saves the real corpus (1,003 messages, 2.3 MB, one save per assistant turn, whole
// arrays and appends in turn, packed by the default policy) through the decorator into the
// JetStream log, and reads it back byte for byte, with its hash: from its cache, cold, and after a
// restart (a new Log and engine on the same stream). Every entry stored is an envelope.
func TestEngine_CorpusOverSealedJetStream(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	require.NoError(t, err)
	c, err := codec.Parse(raw)
	require.NoError(t, err)
	var cuts []int
	for i, m := range c.Messages {
		if codec.MessageRole(m) == "assistant" {
			cuts = append(cuts, i+1)
		}
	}
	if cuts[len(cuts)-1] != len(c.Messages) {
		cuts = append(cuts, len(c.Messages))
	}
	version := func(i int) []byte { return append(append([]byte{'['}, c.Span(0, cuts[i])...), ']') }

	nc, _, _ := startServer(t)
	keys := keysOf(t, map[string]any{"corpus": newKey()})
	js := openLog(t, nc, false)
	e := engine.New(sealing.NewLog(js, keys), engine.Config{})
	k := engine.Key{Namespace: "corpus", Session: "pi", Agent: "main"}
	packs := 0
	for i := range cuts {
		req := engine.SaveRequest{Key: k, SaveID: fmt.Sprint("turn-", i), Now: time.Now(), Payload: version(i)}
		if i%2 == 1 { // an append of what grew
			base := uint64(i)
			req.Base, req.Payload = &base, append(append([]byte{'['}, c.Span(cuts[i-1], cuts[i])...), ']')
		}
		s, err := e.Save(ctx, req)
		require.NoError(t, err, "save %d", i)
		require.Equal(t, uint64(i+1), s.Record.Version)
		require.Equal(t, sha(version(i)), s.Record.Hash, "save %d", i)
		if s.PackDue {
			r, err := e.Pack(ctx, k, false)
			require.NoError(t, err)
			packs += min(r.Entries, 1)
		}
	}
	require.Positive(t, packs)
	var n int
	require.NoError(t, js.Range(ctx, k, 0, 0, func(e engine.Entry) bool {
		require.True(t, sealing.IsEnvelope(e.Data), "entry %d is not sealed", e.Seq)
		n++
		return true
	}))
	t.Logf("%d saves, %d packs, %d entries stored, all sealed", len(cuts), packs, n)

	check := func(e *engine.Engine, every int) {
		for i := range cuts {
			if i%every != 0 && i != len(cuts)-1 {
				continue
			}
			got, rec, err := e.Read(ctx, k, uint64(i+1), engine.ReadOptions{Verify: true})
			require.NoError(t, err, "version %d", i+1)
			require.Equal(t, sha(version(i)), rec.Hash)
			require.True(t, bytes.Equal(got, version(i)), "version %d is not byte-identical", i+1)
		}
		h, err := e.History(ctx, k)
		require.NoError(t, err)
		require.Len(t, h, len(cuts))
	}
	check(e, 23)
	e.Forget()
	check(e, 61)
	restarted := engine.New(sealing.NewLog(openLog(t, nc, false), keys), engine.Config{})
	check(restarted, 97)
}
