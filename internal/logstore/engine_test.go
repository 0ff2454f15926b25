package logstore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/logstore"
)

// The engine over the JetStream log, end to end: what internal/engine's tests check on memlog
// (saves, packs, reads, leases, several engines on one log) on the real stores the daemon runs on.
// The engine's rules themselves are tested in internal/engine; these tests are about the two
// together on a server: an R3 cluster (cluster_test.go) and nats-server 2.9.10 (below).

var (
	ctx = context.Background()
	now = time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
)

// openEngine opens the log on nc (creating the stream) and an engine on it.
func openEngine(t testing.TB, nc *nats.Conn, lcfg logstore.LogConfig, cfg engine.Config) (*engine.Engine, *logstore.Log) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var l *logstore.Log
	var err error
	for { // a cluster just started may not have placed its peers yet ("peer offline")
		if l, err = logstore.OpenLog(c, nc, lcfg); err == nil || c.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err)
	return engine.New(l, cfg), l
}

// The engine over the log on Debian's nats-server 2.9.10 (the oldest single server checkpointd
// supports): no batched direct gets, so every read goes entry by entry, and the index keeps the
// entries of lost creations (docs/format.md §8.15b). Saves, packs and the deletes they make,
// reads after a restart of the engine, leases, a history page, a fork and a deletion.
func TestEngine_OldNATS(t *testing.T) {
	bin := logstore.OldNATS(t)
	nc := logstore.Connect(t, logstore.StartProcess(t, bin))
	require.False(t, logstore.ServerAtLeast(nc, 2, 11))
	e, l := openEngine(t, nc, logstore.LogConfig{}, engine.Config{PackEntries: 8})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	enginetest.SaveTurns(t, e, k, 0, 80, 0) // 40 versions: packs, and deletes what they packed
	e.Forget()
	enginetest.CheckVersions(t, e, k, 40)
	require.Equal(t, 5, enginetest.Entries(t, l, k), "five packs of 8 saves, the packed entries deleted")

	_, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "me", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "x", Base: enginetest.U64(40), Payload: enginetest.Array(80, 82), Now: now})
	require.ErrorIs(t, err, engine.ErrLeased)
	enginetest.SaveTurns(t, e, k, 80, 84, 1)
	e.Forget()
	enginetest.CheckVersions(t, e, k, 42)
	page, next, err := e.HistoryPage(ctx, k, engine.HistoryCursor{}, 10)
	require.NoError(t, err)
	require.Len(t, page, 10)
	require.Equal(t, uint64(42), page[0].Version)
	require.NotZero(t, next)

	fork := engine.Key{Namespace: "n", Session: "fork", Agent: "a"}
	_, err = e.Fork(ctx, engine.ForkRequest{From: k, Version: 17, To: fork, SaveID: "f", Now: now})
	require.NoError(t, err)
	got, _, err := e.Read(ctx, fork, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(enginetest.Conversation(34)), string(got))

	_, err = e.Delete(ctx, k, enginetest.U64(42))
	require.NoError(t, err)
	e.Forget()
	_, err = e.Head(ctx, k)
	require.ErrorIs(t, err, engine.ErrNotFound)
	keys, _, err := e.Sessions(ctx, "n", 0, 10)
	require.NoError(t, err)
	require.NotEmpty(t, keys)
}

// startEngine runs an embedded server and opens an engine on its log.
func startEngine(t testing.TB, cfg engine.Config) (*engine.Engine, *logstore.Log) {
	t.Helper()
	s, err := logstore.StartEmbedded(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return openEngine(t, logstore.Connect(t, s.ClientURL()), logstore.LogConfig{}, cfg)
}

// A stored piece whose bytes no longer match its CRC-32C (here: the CRC altered in a copy of the
// log's entries) reads as corrupt, never as another conversation; the versions before it still
// read. Moved from the prototype's TestLogBuilder_CRC, end to end.
func TestEngine_AlteredPieceIsCorrupt(t *testing.T) {
	e, l := startEngine(t, engine.Config{NoPack: true})
	k, copyK := engine.Key{Namespace: "n", Session: "s", Agent: "a"}, engine.Key{Namespace: "n", Session: "copy", Agent: "a"}
	enginetest.SaveTurns(t, e, k, 0, 6, 0)
	// The second save's piece: the raw bytes it added (",", then its messages joined by ","),
	// whose CRC-32C (Castagnoli, big-endian) its entry carries.
	piece := append([]byte{','}, enginetest.Array(2, 4)[1:len(enginetest.Array(2, 4))-1]...)
	sum := crc32.Checksum(piece, crc32.MakeTable(crc32.Castagnoli))
	crc := binary.BigEndian.AppendUint32(nil, sum)
	var after uint64
	altered := 0
	require.NoError(t, l.Range(ctx, k, 0, 0, func(en engine.Entry) bool {
		data := bytes.Clone(en.Data)
		if i := bytes.Index(data, crc); i >= 0 {
			data[i+3]++
			altered++
		}
		var err error
		after, err = l.Append(ctx, copyK, data, after)
		require.NoError(t, err)
		return true
	}))
	require.Equal(t, 1, altered, "the CRC-32C is found in one entry")
	got, _, err := e.Read(ctx, copyK, 1, engine.ReadOptions{})
	require.NoError(t, err)
	require.Equal(t, string(enginetest.Conversation(2)), string(got))
	for _, v := range []uint64{2, 3} {
		_, _, err = e.Read(ctx, copyK, v, engine.ReadOptions{})
		require.ErrorIs(t, err, engine.ErrCorrupt, "version %d", v)
	}
	got, _, err = e.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(enginetest.Conversation(6)), string(got), "the original is untouched")
}

// Saves are compressed at zstd's fastest level with FastSaves: the same saves store other
// bytes, and both read back, across a pack and a restart of the engine (a new frame). Moved from
// the prototype's TestStore_FastSaves; the engine's own tests do not tell the levels apart.
func TestEngine_FastSaves(t *testing.T) {
	fast, l := startEngine(t, engine.Config{PackEntries: 8, FastSaves: true})
	slow := engine.New(l, engine.Config{PackEntries: 8})
	stored := map[bool]int64{}
	for i, e := range []*engine.Engine{fast, slow} {
		k := engine.Key{Namespace: "n", Session: fmt.Sprint("s", i), Agent: "a"}
		enginetest.SaveTurns(t, e, k, 0, 40, 0)
		e.Forget()
		enginetest.SaveTurns(t, e, k, 40, 60, 0)
		enginetest.CheckVersions(t, e, k, 30)
		h, err := e.History(ctx, k)
		require.NoError(t, err)
		for _, r := range h[20:] { // after the restart, before any pack: as each save stored it
			stored[i == 0] += r.StoredBytes
		}
	}
	require.NotEqual(t, stored[true], stored[false], "saves at SpeedFastest stored the default level's bytes")
}

// The history scenarios (enginetest.RunHistory: walks newest first by back pointer and by the
// tail, across packs, state entries, a fork, retention, a deletion) on the embedded server.
func TestEngine_HistoryWalk(t *testing.T) {
	_, l := startEngine(t, engine.Config{})
	enginetest.RunHistory(t, l)
}
