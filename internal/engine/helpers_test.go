package engine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

var ctx = context.Background()

// newEngine returns an engine on a fresh in-memory log whose entries are at most maxEntry bytes.
func newEngine(t testing.TB, maxEntry int, cfg engine.Config) (*engine.Engine, *memlog.Log) {
	t.Helper()
	log := memlog.New(maxEntry)
	return engine.New(log, cfg), log
}

// message is a canonical message whose text names i, a little repetitive, as conversations are.
func message(i int) []byte {
	role := []string{"user", "assistant"}[i%2]
	return []byte(fmt.Sprintf(`{"role":%q,"content":[{"type":"text","text":"turn %d: %s"}]}`, role, i,
		strings.Repeat("the quick brown fox ", 1+i%7)))
}

// conversation is the JSON array of the first n messages.
func conversation(n int) []byte { return array(0, n) }

// array is the JSON array of messages from..to-1.
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

func u64(v uint64) *uint64 { return &v }

var now = time.Date(2026, 11, 24, 1, 0, 0, 123456789, time.UTC)

// saveTurns saves messages from..to-1 two at a time as appends (Base), packing when due as the
// daemon does after answering.
func saveTurns(t testing.TB, e *engine.Engine, k engine.Key, from, to int) {
	t.Helper()
	for i := from; i < to; i += 2 {
		end := min(i+2, to)
		base := uint64(i / 2)
		saved, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("save-%d", i), Base: &base,
			Payload: array(i, end), Now: now})
		require.NoError(t, err, "saving messages from %d", i)
		require.False(t, saved.Duplicate)
		if saved.PackDue {
			_, err = e.Pack(ctx, k, false)
			require.NoError(t, err, "packing after the save of message %d", i)
		}
	}
}

// checkVersions restores the head and a spread of old versions (version v holds 2v messages).
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
}

// entries counts the entries of k's log.
func entries(t testing.TB, log *memlog.Log, k engine.Key) int {
	t.Helper()
	n := 0
	require.NoError(t, log.Range(ctx, k, 0, 0, func(engine.Entry) bool { n++; return true }))
	return n
}

type ctxT = context.Context

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

var zstdDecoder, _ = zstd.NewReader(nil)
