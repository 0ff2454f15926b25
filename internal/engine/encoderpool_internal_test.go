package engine

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// An encoder a session dropped is reused for the next frame instead of building one (~4 MiB
// each), and what it compresses then is a frame of its own: it decodes alone to its input.
func TestEncoderReused(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a collection would empty the pool
	first, second := []byte(`[{"role":"user","content":"one"}`), []byte(`,{"role":"assistant","content":"two"}]`)
	warm, err := newEncoder(1<<20, false)
	require.NoError(t, err)
	_, err = warm.add(first)
	require.NoError(t, err)
	warm.recycle()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const rounds = 10
	for i := range rounds {
		enc, err := newEncoder(1<<20, false)
		require.NoError(t, err)
		data, err := enc.add(second)
		require.NoError(t, err)
		got, err := decoder.DecodeAll(append(append([]byte(nil), data...), frameEnd...), nil)
		require.NoError(t, err, "round %d", i)
		require.Equal(t, string(second), string(got), "round %d: a reused encoder starts a frame of its own", i)
		enc.recycle()
	}
	runtime.ReadMemStats(&after)
	if raceEnabled {
		return // the pool drops encoders on purpose: what it saves cannot be counted
	}
	// Building an encoder each round allocates ~40 MiB here; reusing one, a few KiB (one round
	// may miss the pool if the goroutine moved to another processor meanwhile).
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(rounds<<20), "allocated by %d encoders", rounds)
}

// A session's first piece, when large (addSplit's size), is compressed at zstd's fastest level: the
// encoder goes back to its pool right after (handOverBytes), and the session's next frame is at the
// default level (docs/format.md §8.15j). A large piece that starts a frame later (an eviction, a
// lost compare-and-swap) and a small first piece are at the default level.
func TestLargeFirstPieceAtTheFastestLevel(t *testing.T) {
	e := &Engine{cfg: Config{}.withDefaults(), maxRun: maxRun} // compress needs no log
	large := make([]byte, 2*splitBytes)
	for i := range large {
		large[i] = 'a' + byte(i%7)
	}
	level := func(version uint64, piece []byte) bool {
		s := &session{last: entryMeta{Head: emptyHead()}}
		s.last.Head.Version = version
		_, err := e.compress(s, &pieceInfo{}, piece)
		require.NoError(t, err)
		defer s.dropEncoder()
		return s.enc.fast
	}
	require.True(t, level(0, large), "a large first piece")
	require.False(t, level(0, large[:splitBytes]), "a first piece below the split size")
	require.False(t, level(3, large), "a large piece starting a frame after version 3")
}
