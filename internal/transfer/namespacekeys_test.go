package transfer_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/sealing"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

func newNamespaceKey(t testing.TB) string {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return base64.StdEncoding.EncodeToString(k)
}

// namespaceKeys parses a --namespace-keys file made of members.
func namespaceKeys(t testing.TB, members map[string]any) *sealing.Keys {
	t.Helper()
	data, err := json.Marshal(members)
	require.NoError(t, err)
	nk, err := sealing.ParseKeys(data)
	require.NoError(t, err)
	return nk
}

// segmentPieces returns every stored entry and value of namespace ns in CP_LOG (what the daemon
// stores for it), by "<subject>#<sequence>".
func segmentPieces(t *testing.T, env *testenv.Env, ns string) map[string][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	st, err := js.Stream(ctx, edge.LogStream)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	out := map[string][]byte{}
	prefixes := []string{"cp.log." + wire.EncodeID(ns) + ".", "cp.val." + wire.EncodeID(ns) + "."}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted (packed)
		}
		require.NoError(t, err)
		if strings.HasPrefix(m.Subject, prefixes[0]) || strings.HasPrefix(m.Subject, prefixes[1]) {
			out[fmt.Sprintf("%s#%d", m.Subject, seq)] = m.Data
		}
	}
	return out
}

// markedConversation is n turns mentioning marker, the last with a string stored as a value
// (incompressible, so that it is stored in several pieces when max_payload is small).
func markedConversation(n int, marker string) []byte {
	noise := make([]byte, 30<<10)
	_, _ = rand.Read(noise)
	var msgs []string
	for i := 0; i < n; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"turn %d: %s %s"}`, i, marker, strings.Repeat("x", 3000)))
	}
	msgs = append(msgs, `{"role":"toolResult","toolCallId":"t1","content":"`+base64.StdEncoding.EncodeToString(noise)+marker+`"}`)
	return []byte("[" + strings.Join(msgs, ",") + "]")
}

// What the daemon stores for a namespace with a key is sealed: every piece (segments, merged
// segments, archives, values; first and later pieces of chunked ones) is an envelope, and nothing in
// the buckets' files holds the saved bytes, raw or zstd-decoded. A namespace without a key is
// stored as before, and the same search finds its marker (so the search works). Every version of
// both restores.
func TestNamespaceKeys_StoredBytesAreSealed(t *testing.T) {
	nk := namespaceKeys(t, map[string]any{"alice": newNamespaceKey(t)})
	env := testenv.StartWithMaxPayload(t, 32<<10, func(c *transfer.Config) {
		c.NamespaceKeys, c.CacheBytes = nk, 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	saved := map[string][][]byte{}
	for _, ns := range []string{"alice", "bob"} {
		marker := "marker-of-" + ns + "-" + fmt.Sprint(time.Now().UnixNano())
		for n := 1; n <= 4; n++ {
			conv := markedConversation(n*3, marker)
			_, err := env.Client.Save(ctx, checkpoint.Key{Namespace: ns, Session: "s"}, conv)
			require.NoError(t, err)
			saved[ns] = append(saved[ns], conv)
		}
		saved[ns+"-marker"] = [][]byte{[]byte(marker)}
	}
	for _, ns := range []string{"alice", "bob"} { // packs write sealed entries too
		_, err := env.Daemon.Engine.Pack(ctx, engine.Key{Namespace: ns, Session: "s", Agent: wire.DefaultAgent}, true)
		require.NoError(t, err)
	}
	for _, ns := range []string{"alice", "bob"} {
		for i, want := range saved[ns] {
			got, _, err := env.Client.Restore(ctx, checkpoint.Key{Namespace: ns, Session: "s"}, uint64(i+1))
			require.NoError(t, err, "%s version %d", ns, i+1)
			require.Equal(t, string(want), string(got))
		}
	}

	alice, bob := segmentPieces(t, env, "alice"), segmentPieces(t, env, "bob")
	require.Greater(t, len(alice), 4, "several entries")
	for k, v := range alice {
		require.True(t, bytes.HasPrefix(v, []byte("CPKE\x01")), "entry %s is not sealed", k)
	}
	for k, v := range bob {
		if strings.HasPrefix(k, "cp.log.") {
			require.True(t, bytes.HasPrefix(v, []byte("CPL2")), "entry %s of a namespace without a key", k)
		}
	}

	env.StopDaemon()
	env.Server.Shutdown()
	env.Server.WaitForShutdown()
	kvFiles := filepath.Join(env.Dir, "jetstream", "$G", "streams")
	var inKV []string
	for _, f := range grepDataDirGlob(t, kvFiles, edge.LogStream, string(saved["alice-marker"][0])) {
		inKV = append(inKV, f)
	}
	require.Empty(t, inKV, "alice's bytes readable in the stream's files")
	require.NotEmpty(t, grepDataDirGlob(t, kvFiles, edge.LogStream, string(saved["bob-marker"][0])), "the search must find bob's marker, or it proves nothing")
}

// grepDataDirGlob is grepDataDir over the directories under dir matching pattern.
func grepDataDirGlob(t *testing.T, dir, pattern, marker string) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(dir, pattern))
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	var found []string
	for _, d := range dirs {
		found = append(found, testenv.GrepDataDir(t, d, marker)...)
	}
	return found
}

// restoreWith restarts the daemon with keys and restores version v of key.
func restoreWith(t *testing.T, env *testenv.Env, keys *sealing.Keys, key checkpoint.Key, v uint64) ([]byte, error) {
	t.Helper()
	env.StopDaemon()
	env.Config.NamespaceKeys = keys
	env.StartDaemon()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, _, err := env.Client.Restore(ctx, key, v)
	return got, err
}

// Keys rotate: the first key of a namespace seals, every listed key opens. A restore with a wrong
// key, no key, or a key that was dropped fails with code corrupt, saying which key is missing, and
// never returns bytes; the daemon keeps serving.
func TestNamespaceKeys_RotationAndWrongKeys(t *testing.T) {
	k1, k2 := newNamespaceKey(t), newNamespaceKey(t)
	env := testenv.Start(t, func(c *transfer.Config) {
		c.NamespaceKeys, c.CacheBytes = namespaceKeys(t, map[string]any{"*": k1}), 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := checkpoint.Key{Namespace: "team", Session: "rotate"}
	v1 := markedConversation(2, "one")
	_, err := env.Client.Save(ctx, key, v1)
	require.NoError(t, err)

	// Rotate: k2 seals from now on, k1 still opens version 1.
	rotated := namespaceKeys(t, map[string]any{"team": []string{k2, k1}})
	got, err := restoreWith(t, env, rotated, key, 1)
	require.NoError(t, err)
	require.Equal(t, string(v1), string(got))
	v2 := markedConversation(3, "one")
	_, err = env.Client.Save(ctx, key, v2)
	require.NoError(t, err)
	got, _, err = env.Client.Restore(ctx, key, 2)
	require.NoError(t, err)
	require.Equal(t, string(v2), string(got))

	for name, keys := range map[string]*sealing.Keys{
		"k1 dropped": namespaceKeys(t, map[string]any{"team": k2}),
		"wrong key":  namespaceKeys(t, map[string]any{"*": newNamespaceKey(t)}),
		"no keys":    nil,
	} {
		got, err := restoreWith(t, env, keys, key, 2)
		require.ErrorIs(t, err, checkpoint.ErrCorrupt, name)
		require.Nil(t, got, name)
		var ce *checkpoint.Error
		require.ErrorAs(t, err, &ce, name)
		require.Equal(t, wire.CodeCorrupt, ce.Code, name)
		require.Contains(t, err.Error(), "which this checkpointd does not hold", name)
	}
	_, err = env.Client.Save(ctx, checkpoint.Key{Namespace: "other", Session: "still serving"}, []byte(`[{"role":"user","content":"hi"}]`))
	require.NoError(t, err, "the daemon keeps serving")
}

// The cluster's operator alters or moves sealed pieces, or writes envelopes of their own: every
// restore fails with code corrupt (the envelope authenticates its bytes and its place), no panic.
func TestNamespaceKeys_AlteredPiecesAreCorruptNeverGarbage(t *testing.T) {
	nk := namespaceKeys(t, map[string]any{"*": newNamespaceKey(t)})
	env := testenv.Start(t, func(c *transfer.Config) { c.NamespaceKeys, c.CacheBytes = nk, 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := checkpoint.Key{Session: "a"}, checkpoint.Key{Session: "b"}
	for _, k := range []checkpoint.Key{a, b} {
		_, err := env.Client.Save(ctx, k, []byte(`[{"role":"user","content":"sealed `+k.Session+`"}]`))
		require.NoError(t, err)
	}
	pieces := segmentPieces(t, env, wire.DefaultNamespace)
	var pieceA, pieceB string
	for k := range pieces {
		if strings.HasPrefix(k, "cp.log.default.a.") {
			pieceA = k
		} else if strings.HasPrefix(k, "cp.log.default.b.") {
			pieceB = k
		}
	}
	require.NotEmpty(t, pieceA)
	require.NotEmpty(t, pieceB)
	sealed := pieces[pieceA]
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)-1] ^= 1
	version2 := bytes.Clone(sealed)
	version2[4] = 2

	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	subjectA, _, _ := strings.Cut(pieceA, "#")
	for _, tc := range []struct {
		name   string
		stored []byte
		want   string
	}{
		{"a flipped bit", flipped, "does not decrypt"},
		{"b's piece moved into a", pieces[pieceB], "does not decrypt"}, // same key: only its place tells
		{"an unknown version", version2, "envelope version 2 is unknown"},
		{"a truncated envelope", sealed[:30], "shorter than its envelope"},
		{"only the magic", []byte("CPKE"), "shorter than its envelope"},
		{"a header with no cipher", sealed[:25], "shorter than its envelope"},
	} {
		_, err := js.Publish(ctx, subjectA, tc.stored) // a's last entry, as the operator wrote it
		require.NoError(t, err)
		got, _, err := env.Client.Restore(ctx, a, 1)
		require.ErrorIs(t, err, checkpoint.ErrCorrupt, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
		require.Nil(t, got, tc.name)
	}
	got, _, err := env.Client.Restore(ctx, b, 1)
	require.NoError(t, err, "the other session is untouched")
	require.Contains(t, string(got), "sealed b")
}

// keyIDs returns the hex key ids of the envelopes among pieces (plain pieces have none).
func keyIDs(pieces map[string][]byte) map[string]bool {
	ids := map[string]bool{}
	for _, p := range pieces {
		if bytes.HasPrefix(p, []byte("CPKE")) && len(p) > 13 {
			ids[fmt.Sprintf("%x", p[5:13])] = true
		}
	}
	return ids
}

// Keys are replaced while the daemon runs (SIGHUP): a new first key seals what is written from then
// on, the old one still opens what it sealed until a file leaves it out, which SetKeys reports by key
// id. Turning encryption on or off needs a restart: refused, the running keys stay.
func TestNamespaceKeys_SetKeysWhileRunning(t *testing.T) {
	k1, k2 := newNamespaceKey(t), newNamespaceKey(t)
	env := testenv.Start(t, func(c *transfer.Config) {
		c.NamespaceKeys, c.CacheBytes = namespaceKeys(t, map[string]any{"*": k1}), 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := checkpoint.Key{Namespace: "team", Session: "live"}
	v1 := markedConversation(2, "one")
	_, err := env.Client.Save(ctx, key, v1)
	require.NoError(t, err)
	first := keyIDs(segmentPieces(t, env, "team"))
	require.Len(t, first, 1)

	dropped, err := env.Daemon.SetNamespaceKeys(namespaceKeys(t, map[string]any{"team": []string{k2, k1}}))
	require.NoError(t, err)
	require.Empty(t, dropped)
	_, err = env.Client.Save(ctx, key, markedConversation(3, "one"))
	require.NoError(t, err)
	both := keyIDs(segmentPieces(t, env, "team"))
	require.Len(t, both, 2, "version 2 is sealed with the new key")
	got, _, err := env.Client.Restore(ctx, key, 1)
	require.NoError(t, err, "the old key still opens version 1")
	require.Equal(t, string(v1), string(got))

	_, err = env.Daemon.SetNamespaceKeys(nil)
	require.ErrorContains(t, err, "restart checkpointd to turn encryption off")
	_, _, err = env.Client.Restore(ctx, key, 1)
	require.NoError(t, err, "a refused reload leaves the running keys")

	dropped, err = env.Daemon.SetNamespaceKeys(namespaceKeys(t, map[string]any{"team": k2}))
	require.NoError(t, err)
	require.Len(t, dropped, 1)
	require.True(t, first[dropped[0]], "the dropped key is the one that sealed version 1: %v", dropped)
	for v := uint64(1); v <= 2; v++ {
		_, _, err = env.Client.Restore(ctx, key, v)
		require.ErrorIs(t, err, checkpoint.ErrCorrupt, "what a dropped key sealed no longer opens (version 2 shares version 1's messages)")
	}
	fresh, after := checkpoint.Key{Namespace: "team", Session: "after"}, markedConversation(2, "two")
	_, err = env.Client.Save(ctx, fresh, after)
	require.NoError(t, err)
	got, _, err = env.Client.Restore(ctx, fresh, 1)
	require.NoError(t, err, "the daemon seals and opens with the new key")
	require.Equal(t, string(after), string(got))

	plain := testenv.Start(t)
	_, err = plain.Daemon.SetNamespaceKeys(namespaceKeys(t, map[string]any{"*": k1}))
	require.ErrorContains(t, err, "restart checkpointd to turn encryption on")
}
