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
		_, err := e.compress(s, &pieceInfo{}, piece, false)
		require.NoError(t, err)
		defer s.dropEncoder()
		return s.enc.fast
	}
	require.True(t, level(0, large), "a large first piece")
	require.False(t, level(0, large[:splitBytes]), "a first piece below the split size")
	require.False(t, level(3, large), "a large piece starting a frame after version 3")
}

// A frame a group entry starts is at zstd's fastest level; a frame keeps its level: single saves
// continue a group's frame at the fastest, a group continues a single save's frame at the default
// level (a new frame would lose the history). docs/format.md §8.15p.
func TestGroupFramesAtTheFastestLevel(t *testing.T) {
	e := &Engine{cfg: Config{}.withDefaults(), maxRun: maxRun} // compress needs no log
	piece := []byte(`{"role":"user","content":"hello"},{"role":"assistant","content":"hi"}`)
	add := func(s *session, group bool) (frame, fast bool) {
		var p pieceInfo
		_, err := e.compress(s, &p, piece, group)
		require.NoError(t, err)
		return p.Frame, s.enc.fast
	}

	grouped := &session{last: entryMeta{Head: emptyHead()}}
	defer grouped.dropEncoder()
	frame, fast := add(grouped, true)
	require.True(t, frame && fast, "a group starting a frame: frame %v, fastest %v", frame, fast)
	frame, fast = add(grouped, false)
	require.True(t, !frame && fast, "a save after it continues its frame: frame %v, fastest %v", frame, fast)

	single := &session{last: entryMeta{Head: emptyHead()}}
	defer single.dropEncoder()
	frame, fast = add(single, false)
	require.True(t, frame && !fast, "a save starting a frame: frame %v, fastest %v", frame, fast)
	frame, fast = add(single, true)
	require.True(t, !frame && !fast, "a group after it continues its frame: frame %v, fastest %v", frame, fast)
}
