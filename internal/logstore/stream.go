package logstore

import (
	"bytes"
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// A session's messages are one zstd stream, cut at every save: a save's data is what the
// session's encoder emits when flushed after the new messages (a run of zstd blocks, the first
// save's starting with a frame header), so every save is compressed against the whole window
// of what came before it. On the real corpus this stores 1.05× zstd(final conversation), against
// 2.42× for each save compressed alone (docs/format.md §8).
//
// The encoder lives in the daemon's session cache. When it is lost (restart, eviction, a lost
// compare-and-swap) the next save starts a new frame (Meta.Frame): the frame before it is never
// closed with a last block, so readers close it themselves with frameEnd before the next.
// Frames carry no checksum (a version's SHA-256 checks what is read).

// frameEnd is an empty raw block flagged last: it ends a frame that was only flushed.
var frameEnd = []byte{0x01, 0x00, 0x00}

// encoder compresses one session's stream.
type encoder struct {
	buf bytes.Buffer
	z   *zstd.Encoder
}

func newEncoder(window int) (*encoder, error) {
	e := &encoder{}
	z, err := zstd.NewWriter(&e.buf, zstd.WithEncoderConcurrency(1), zstd.WithAllLitEntropyCompression(true),
		zstd.WithWindowSize(window), zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, err
	}
	e.z = z
	return e, nil
}

// add compresses p and returns the stream's bytes for it (valid until the next add).
func (e *encoder) add(p []byte) ([]byte, error) {
	e.buf.Reset()
	if _, err := e.z.Write(p); err != nil {
		return nil, err
	}
	if err := e.z.Flush(); err != nil {
		return nil, err
	}
	return e.buf.Bytes(), nil
}

// decoder is shared: DecodeAll is safe for concurrent use. Its memory is bounded by the window
// the encoders use and by maxDecoded.
const maxDecoded = 256 << 20

var decoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxDecoded),
	zstd.WithDecoderMaxWindow(8<<20))

// joinData concatenates the data of consecutive extents into one stored byte string, ending
// each frame before an extent that starts a new one. The result continues the frame of the last
// extent (it is not closed). A merge stores it; a reader decodes it (decodeExtents).
func joinData(exts []Extent, data [][]byte) []byte {
	n := 0
	for _, d := range data {
		n += len(d) + len(frameEnd)
	}
	out := make([]byte, 0, n)
	for i, d := range data {
		if len(out) > 0 && exts[i].Frame {
			out = append(out, frameEnd...)
		}
		out = append(out, d...)
	}
	return out
}

// decodeExtents returns the raw bytes of exts (messages joined by ","), given their stored data.
// Extents are decoded in runs that share frames; a run ends at a cut extent or before an extent
// that starts a frame, and contributes exactly its extents' RawBytes.
func decodeExtents(exts []Extent, data [][]byte, want int64) ([]byte, error) {
	out := make([]byte, 0, want)
	for start := 0; start < len(exts); {
		end := start + 1
		for end < len(exts) && !exts[end].Frame && !exts[end-1].Cut {
			end++
		}
		var raw int64
		for _, e := range exts[start:end] {
			raw += e.RawBytes
		}
		stream := joinData(exts[start:end], data[start:end])
		if len(stream) == 0 && raw == 0 {
			start = end // a fork's own extent: a version, no bytes
			continue
		}
		got, err := decoder.DecodeAll(append(stream, frameEnd...), make([]byte, 0, raw))
		if err != nil {
			return nil, fmt.Errorf("%w: extents at seq %d..%d: %v", ErrMalformed, exts[start].Seq, exts[end-1].Seq, err)
		}
		if int64(len(got)) < raw {
			return nil, fmt.Errorf("%w: extents at seq %d..%d decode to %d bytes, want %d", ErrMalformed,
				exts[start].Seq, exts[end-1].Seq, len(got), raw)
		}
		out = append(out, got[:raw]...)
		start = end
	}
	return out, nil
}
