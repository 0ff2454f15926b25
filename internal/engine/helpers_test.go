package engine_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

var ctx = context.Background()

// newEngine returns an engine on a fresh in-memory log whose entries are at most maxEntry bytes.
func newEngine(t testing.TB, maxEntry int, cfg engine.Config) (*engine.Engine, *memlog.Log) {
	t.Helper()
	log := memlog.New(maxEntry)
	return engine.New(log, cfg), log
}

// The helpers internal/logstore's tests share (enginetest), under their short names here.
var (
	message       = enginetest.Message
	conversation  = enginetest.Conversation
	array         = enginetest.Array
	u64           = enginetest.U64
	now           = enginetest.Now
	checkVersions = enginetest.CheckVersions
)

// saveTurns saves messages from..to-1 two at a time as appends, packing when due
// (enginetest.SaveTurns without a lease).
func saveTurns(t testing.TB, e *engine.Engine, k engine.Key, from, to int) {
	t.Helper()
	enginetest.SaveTurns(t, e, k, from, to, 0)
}

// entries counts the entries of k's log.
func entries(t testing.TB, log *memlog.Log, k engine.Key) int {
	t.Helper()
	return enginetest.Entries(t, log, k)
}

type ctxT = context.Context

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

var zstdDecoder, _ = zstd.NewReader(nil)
