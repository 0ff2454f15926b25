package logstore_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
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

// message is a canonical message whose text names i, a little repetitive, as conversations are.
func message(i int) []byte {
	role := []string{"user", "assistant"}[i%2]
	return []byte(fmt.Sprintf(`{"role":%q,"content":[{"type":"text","text":"turn %d: %s"}]}`, role, i,
		strings.Repeat("the quick brown fox ", 1+i%7)))
}

// array is the JSON array of messages from..to-1; conversation(n) the first n.
func array(from, to int) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := from; i < to; i++ {
		if i > from {
			b.WriteByte(',')
		}
		b.Write(message(i))
	}
	b.WriteByte(']')
	return b.Bytes()
}

func conversation(n int) []byte { return array(0, n) }

func u64(v uint64) *uint64 { return &v }

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

// saveTurns saves messages from..to-1 two at a time as appends (Base), with the writer's lease
// epoch, packing when due as the daemon does after answering.
func saveTurns(t testing.TB, e *engine.Engine, k engine.Key, from, to int, epoch uint64) {
	t.Helper()
	for i := from; i < to; i += 2 {
		end := min(i+2, to)
		saved, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("save-%d", i), Base: u64(uint64(i / 2)),
			Payload: array(i, end), Epoch: epoch, Now: now})
		require.NoError(t, err, "saving messages from %d", i)
		require.False(t, saved.Duplicate)
		require.Equal(t, uint64(end/2), saved.Record.Version)
		if saved.PackDue {
			_, err = e.Pack(ctx, k, false)
			require.NoError(t, err, "packing after the save of message %d", i)
		}
	}
}

// checkVersions reads the head and a spread of old versions (version v holds 2v messages), with
// their hashes, and the whole history.
func checkVersions(t testing.TB, e *engine.Engine, k engine.Key, versions int) {
	t.Helper()
	got, rec, err := e.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, uint64(versions), rec.Version)
	require.Equal(t, string(conversation(2*versions)), string(got))
	for _, v := range []int{1, 2, 3, versions / 3, versions / 2, versions - 1} {
		if v < 1 {
			continue
		}
		got, rec, err := e.Read(ctx, k, uint64(v), engine.ReadOptions{Verify: true})
		require.NoError(t, err, "version %d", v)
		require.Equal(t, uint64(v), rec.Version)
		require.Equal(t, string(conversation(2*v)), string(got), "version %d", v)
	}
	history, err := e.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, history, versions)
	for i, r := range history {
		require.Equal(t, uint64(i+1), r.Version)
	}
}

// entries counts the entries of k's log.
func entries(t testing.TB, l engine.Log, k engine.Key) int {
	t.Helper()
	n := 0
	require.NoError(t, l.Range(ctx, k, 0, 0, func(engine.Entry) bool { n++; return true }))
	return n
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
	saveTurns(t, e, k, 0, 80, 0) // 40 versions: packs, and deletes what they packed
	e.Forget()
	checkVersions(t, e, k, 40)
	require.Equal(t, 5, entries(t, l, k), "five packs of 8 saves, the packed entries deleted")

	_, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "me", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "x", Base: u64(40), Payload: array(80, 82), Now: now})
	require.ErrorIs(t, err, engine.ErrLeased)
	saveTurns(t, e, k, 80, 84, 1)
	e.Forget()
	checkVersions(t, e, k, 42)
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
	require.Equal(t, string(conversation(34)), string(got))

	_, err = e.Delete(ctx, k, u64(42))
	require.NoError(t, err)
	e.Forget()
	_, err = e.Head(ctx, k)
	require.ErrorIs(t, err, engine.ErrNotFound)
	keys, _, err := e.Sessions(ctx, "n", 0, 10)
	require.NoError(t, err)
	require.NotEmpty(t, keys)
}
