package engine_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
)

// A large first save (the corpus's 599 KB conversation) is compressed in two halves at once: its
// entry's data is a whole frame, then the frame the session's next saves continue. Every version
// reads back byte for byte, as a conversation and as zstd any decoder decodes, from the engine that
// wrote it and after a restart, before and after a pack; with FastSaves too.
func TestLargeFirstSaveInTwoFrames(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one core: compressed as one frame")
	}
	raw, err := os.ReadFile("../../testdata/corpus/claude_code_spotter_258c7280.json")
	require.NoError(t, err)
	c, err := codec.Parse(raw)
	require.NoError(t, err)
	n := len(c.Messages)
	version := func(to int) []byte { return append(append([]byte{'['}, c.Span(0, to)...), ']') }
	dec, err := zstd.NewReader(nil)
	require.NoError(t, err)
	defer dec.Close()
	for _, fast := range []bool{false, true} {
		t.Run(fmt.Sprint("FastSaves ", fast), func(t *testing.T) {
			e, log := newEngine(t, 1<<20, engine.Config{FastSaves: fast})
			k := engine.Key{Namespace: "n", Session: "large", Agent: "a"}
			cuts := []int{n - 4, n - 2, n} // a first save of all but 4 messages, then 2 appends
			for i, to := range cuts {
				req := engine.SaveRequest{Key: k, Expected: u64(uint64(i)), Payload: version(to), Now: now}
				if i > 0 {
					req.Base, req.Payload = u64(uint64(i)), append(append([]byte{'['}, c.Span(cuts[i-1], to)...), ']')
				}
				_, err := e.Save(ctx, req)
				require.NoError(t, err, "save %d", i)
			}
			first, err := log.Last(ctx, k) // the session's entries: find the first save's
			require.NoError(t, err)
			var frames []int
			require.NoError(t, log.Range(ctx, k, 0, first.Seq, func(en engine.Entry) bool {
				f, err := engine.SaveFrames(en.Data)
				require.NoError(t, err)
				frames = append(frames, f)
				return true
			}))
			// The second save starts a frame too: the first gave its encoder back.
			require.Equal(t, []int{2, 1, 0}, frames, "frames the saves' data starts")
			reads := func(when string) {
				for i, to := range cuts {
					got, rec, err := e.Read(ctx, k, uint64(i+1), engine.ReadOptions{Verify: true})
					require.NoError(t, err, "%s: version %d", when, i+1)
					require.Equal(t, hashOf(version(to)), rec.Hash)
					require.True(t, string(got) == string(version(to)), "%s: version %d", when, i+1)
					z, _, err := e.ReadZstd(ctx, k, uint64(i+1))
					require.NoError(t, err, "%s: version %d", when, i+1)
					got, err = dec.DecodeAll(z, nil)
					require.NoError(t, err, "%s: version %d", when, i+1)
					require.True(t, string(got) == string(version(to)), "%s: ReadZstd of version %d", when, i+1)
				}
			}
			reads("written")
			e.Forget()
			reads("after a restart")
			_, err = e.Pack(ctx, k, true)
			require.NoError(t, err)
			reads("packed")
		})
	}
}

// A large save refused after its compression began (an import whose hash is not the
// conversation's) leaves nothing of it in the session's stream: the next save reads back.
func TestLargeSaveRefusedAfterItsCompressionBegan(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/corpus/claude_code_spotter_258c7280.json")
	require.NoError(t, err)
	c, err := codec.Parse(raw)
	require.NoError(t, err)
	n := len(c.Messages)
	version := func(from, to int) []byte { return append(append([]byte{'['}, c.Span(from, to)...), ']') }
	e, _ := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "refused", Agent: "a"}
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, Expected: u64(0), Payload: version(0, 2), Now: now})
	require.NoError(t, err)
	wrong := "sha256:" + strings.Repeat("0", 64)
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, Payload: version(0, n-2), Now: now,
		Import: &engine.Import{Version: 2, Created: now, Hash: wrong, Origin: engine.Origin{Via: engine.ReasonImport, Source: "test", At: now}}})
	require.ErrorIs(t, err, engine.ErrHashMismatch)
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, Base: u64(1), Payload: version(2, n), Now: now})
	require.NoError(t, err)
	got, _, err := e.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.True(t, string(got) == string(version(0, n)))
}

// A session's first save of 16 KiB or more gives its encoder back (for the next session's first
// save, warm): the session's second save starts a frame of its own, and every version reads back.
// A smaller first save keeps it.
func TestFirstSaveGivesItsEncoderBack(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	for _, first := range []int{2, 200} { // messages of the first save: ~0.1 KiB, ~20 KiB
		k := engine.Key{Namespace: "n", Session: fmt.Sprint("s", first), Agent: "a"}
		_, err := e.Save(ctx, engine.SaveRequest{Key: k, Expected: u64(0), Payload: conversation(first), Now: now})
		require.NoError(t, err)
		for v := uint64(1); v <= 2; v++ {
			_, err = e.Save(ctx, engine.SaveRequest{Key: k, Base: u64(v), Payload: array(first+2*int(v)-2, first+2*int(v)), Now: now})
			require.NoError(t, err)
		}
		var frames []bool
		require.NoError(t, log.Range(ctx, k, 0, 0, func(en engine.Entry) bool {
			_, frame, _, err := engine.SavePiece(en.Data)
			require.NoError(t, err)
			frames = append(frames, frame)
			return true
		}))
		want := []bool{true, false, false}
		if first == 200 {
			want[1] = true
		}
		require.Equal(t, want, frames, "%d messages first: the saves that start a frame", first)
		got, _, err := e.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		require.Equal(t, string(conversation(first+4)), string(got))
	}
}
