package codec

import (
	"bytes"
	"os"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// The whole blocks before a cut make a frame of their own that a plain decoder reads as the bytes
// before the cut: in a frame written at once (single segment, its content size in the header) and in
// one written as a stream (a window descriptor), for cuts before, at and past block boundaries.
func TestZstdFramePrefix_WholeBlocksBeforeTheCut(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	require.NoError(t, err)
	var streamed bytes.Buffer
	w, err := NewBlobWriter(&streamed)
	require.NoError(t, err)
	_, err = w.Write(raw)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	dec, err := zstd.NewReader(nil)
	require.NoError(t, err)
	defer dec.Close()

	for name, frame := range map[string][]byte{"EncodeAll": CompressZstd(raw), "stream": streamed.Bytes()[HeaderSize:]} {
		t.Run(name, func(t *testing.T) {
			for _, n := range []int{maxBlock, maxBlock + 1, 3*maxBlock - 1, 1 << 20, len(raw) - 1} {
				out, prefix, ok := ZstdFramePrefix(frame, raw, n)
				require.True(t, ok, "cut at %d", n)
				require.LessOrEqual(t, prefix, n)
				require.Greater(t, prefix, n-maxBlock, "every whole block before the cut is taken")
				got, err := dec.DecodeAll(out, nil)
				require.NoError(t, err)
				require.True(t, bytes.Equal(raw[:prefix], got), "cut at %d decodes to the first %d bytes", n, prefix)
				require.Less(t, len(out), len(frame))
			}
			_, _, ok := ZstdFramePrefix(frame, raw, maxBlock-1)
			require.False(t, ok, "no whole block before the cut")
		})
	}

	// Blocks that do not decode to what their position says are never passed on.
	frame := CompressZstd(raw)
	other := bytes.Clone(raw)
	other[10] ^= 1
	_, _, ok := ZstdFramePrefix(frame, other, 1<<20)
	require.False(t, ok, "checked against raw")
	_, _, ok = ZstdFramePrefix([]byte("not a frame"), raw, 1<<20)
	require.False(t, ok)
}
