package codec

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"slices"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// ledger is a Growth that records what a read reserved: what it holds, and the most it held.
type ledger struct {
	held, peak, total int64
	limit             int64 // refuse beyond this many held (0: never)
}

var errLedger = errors.New("over the ledger's limit")

func (l *ledger) Reserve(n int64) error {
	if l.limit > 0 && l.held+n > l.limit {
		return errLedger
	}
	l.held += n
	l.total += n
	l.peak = max(l.peak, l.held)
	return nil
}

func (l *ledger) Release(n int64) { l.held -= n }

// oneByteReader hands out a byte per read, as a slow chunked body might.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

func TestReadBody_GrowsWithTheBytesRead(t *testing.T) {
	for _, n := range []int{0, 1, minBodyBuffer - 1, minBodyBuffer, minBodyBuffer + 1, 100_000, 3 << 20, 9<<20 + 7} {
		raw := make([]byte, n)
		_, _ = rand.Read(raw)
		var l ledger
		got, err := ReadBody(bytes.NewReader(raw), 16<<20, &l)
		require.NoError(t, err, n)
		require.True(t, bytes.Equal(raw, got), n)
		blocks := min(2*n, n+maxBodyBlock) + minBodyBuffer // the last block is at most twice the rest, and at most maxBodyBlock
		require.LessOrEqual(t, l.peak, int64(n+blocks), "%d bytes: blocks and their join, nothing more", n)
		require.Equal(t, int64(cap(got)), l.held, "%d bytes: what is held is the result", n)
	}
	raw := bytes.Repeat([]byte("x"), 5000)
	got, err := ReadBody(oneByteReader{bytes.NewReader(raw)}, 5000, &ledger{})
	require.NoError(t, err)
	require.Equal(t, raw, got)
	_, err = ReadBody(bytes.NewReader(raw), 4999, &ledger{})
	require.ErrorIs(t, err, ErrTooLarge)
}

// A decompression bomb costs at most the limit, one block and the decoder's window, whatever it
// declares; a frame's declared size is believed only once half of it is there.
func TestDecompressBody_BoundedByWhatIsDecoded(t *testing.T) {
	const limit = 8 << 20
	bomb := CompressZstd(make([]byte, 64<<20))
	var l ledger
	_, err := DecompressBody(bytes.NewReader(bomb), bomb, limit, &l)
	require.ErrorIs(t, err, ErrTooLarge)
	require.LessOrEqual(t, l.total, int64(limit+maxBodyBlock+decoderBytes(MaxBodyWindow)), "everything it ever reserved")

	// An honest body: its declared size lets it skip the join.
	raw := make([]byte, 20<<20)
	_, _ = rand.Read(raw[:1<<20])
	z := CompressZstd(raw)
	l = ledger{}
	got, err := DecompressBody(bytes.NewReader(z), z[:64], 32<<20, &l)
	require.NoError(t, err)
	require.True(t, bytes.Equal(raw, got))
	require.LessOrEqual(t, l.peak, int64(len(raw))*3/2+maxBodyBlock+decoderBytes(MaxBodyWindow))

	// A frame whose header declares the limit but holds 2 KiB: nothing sized from its word.
	liar := declaring(t, CompressZstd(bytes.Repeat([]byte("x"), 2048)), limit)
	var h zstd.Header
	require.NoError(t, h.Decode(liar))
	require.Equal(t, uint64(limit), h.FrameContentSize)
	l = ledger{}
	_, err = DecompressBody(bytes.NewReader(liar), liar, limit, &l)
	require.ErrorIs(t, err, ErrMalformed)
	require.Less(t, l.total, int64(1<<20)+decoderBytes(MaxBodyWindow))
}

func TestDecompressBody_RefusesLargeWindowsAndHonoursTheGrowth(t *testing.T) {
	// zstd --long: a 128 MiB window, which no body decoder keeps.
	var long bytes.Buffer
	enc, err := zstd.NewWriter(&long, zstd.WithWindowSize(128<<20), zstd.WithEncoderConcurrency(1))
	require.NoError(t, err)
	_, _ = enc.Write(bytes.Repeat([]byte("abc"), 1<<20))
	require.NoError(t, enc.Close())
	_, err = DecompressBody(bytes.NewReader(long.Bytes()), nil, 256<<20, &ledger{})
	require.ErrorIs(t, err, ErrMalformed)
	require.Contains(t, err.Error(), "window")

	// The caller's refusal ends the read and is returned as it is.
	z := CompressZstd(make([]byte, 4<<20))
	_, err = DecompressBody(bytes.NewReader(z), z, 8<<20, &ledger{limit: 10 << 20})
	require.ErrorIs(t, err, errLedger)
	_, err = ReadBody(bytes.NewReader(make([]byte, 1<<20)), 8<<20, &ledger{limit: 64 << 10})
	require.ErrorIs(t, err, errLedger)

	// Concatenated frames decode to the concatenation, garbage after them is malformed.
	two := append(CompressZstd([]byte("[1,")), CompressZstd([]byte("2]"))...)
	got, err := DecompressBody(bytes.NewReader(two), two, 5, &ledger{})
	require.NoError(t, err)
	require.Equal(t, "[1,2]", string(got))
	_, err = DecompressBody(bytes.NewReader(append(two, "junk"...)), two, 100, &ledger{})
	require.ErrorIs(t, err, ErrMalformed)
}

// declaring returns the single-segment frame z with its header's content size replaced by size
// (a 4-byte field): a frame that lies about what it holds.
func declaring(t testing.TB, z []byte, size uint32) []byte {
	var h zstd.Header
	require.NoError(t, h.Decode(z))
	require.True(t, h.SingleSegment)
	fhd := z[4]&^0xC0 | 2<<6 // Frame_Content_Size_Flag 2: four bytes
	out := append([]byte{}, z[:4]...)
	out = append(out, fhd, byte(size), byte(size>>8), byte(size>>16), byte(size>>24))
	return append(out, z[h.HeaderSize:]...)
}

// A large body is compressed as several frames (when there are cores to compress them at once),
// the first the largest; any zstd decoder, and DecompressBody, decode them to the body, and a
// small body stays one frame.
func TestCompressBody_FramesDecodeToTheBody(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one frame on one core")
	}
	dec, err := zstd.NewReader(nil) // any decoder
	require.NoError(t, err)
	defer dec.Close()
	raw := make([]byte, maxFramedBody+1)
	for i := range raw {
		raw[i] = byte('a' + i*i%26) // compressible, not trivially
	}
	for _, size := range []int{1000, 2*BodyFrameBytes - 1, 2 * BodyFrameBytes, 3*BodyFrameBytes + 5, maxFramedBody, len(raw)} {
		body := CompressBody(raw[:size])
		sizes := frameSizes(t, body)
		want := min(size/BodyFrameBytes, maxBodyFrames, runtime.GOMAXPROCS(0))
		if size > maxFramedBody {
			want = 1 // sent in chunks: one frame declares the whole size
		}
		require.Len(t, sizes, max(want, 1), "%d bytes", size)
		require.Equal(t, slices.Max(sizes), sizes[0], "%d bytes: the first frame is the largest", size)
		plain, err := dec.DecodeAll(body, nil)
		require.NoError(t, err)
		require.True(t, bytes.Equal(raw[:size], plain), "%d bytes", size)
		got, err := DecompressBody(bytes.NewReader(body), body, int64(size), &ledger{})
		require.NoError(t, err)
		require.True(t, bytes.Equal(raw[:size], got), "%d bytes", size)
	}
}

// frameSizes returns the content size each frame of body declares.
func frameSizes(t *testing.T, body []byte) []int {
	var sizes []int
	for len(body) > 0 {
		var h zstd.Header
		require.NoError(t, h.Decode(body))
		require.True(t, h.HasFCS)
		sizes = append(sizes, int(h.FrameContentSize))
		n, ok := frameLen(body)
		require.True(t, ok)
		body = body[n:]
	}
	return sizes
}

// A body of several frames decodes to what one stream decodes to: its runs at once, within the
// same limits; a body that is not whole frames is decoded as a stream, which says what is wrong.
func TestDecompressFrames_AsOneStream(t *testing.T) {
	raw := make([]byte, 3*BodyFrameBytes)
	for i := range raw {
		raw[i] = byte('a' + i*i%26)
	}
	var tiny []byte // 300 frames: at most maxBodyFrames runs
	for i := range 300 {
		tiny = append(tiny, CompressZstd([]byte{byte('a' + i%26)})...)
	}
	skip := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, skippableMagic+3), 5)
	skip = append(skip, "12345"...)
	withSkip := append(append(CompressZstd(raw[:1000]), skip...), CompressZstd(raw[1000:2000])...)
	for name, tc := range map[string]struct {
		body []byte
		want []byte
	}{
		"one frame":          {CompressZstd(raw), raw},
		"CompressBody":       {CompressBody(raw), raw},
		"300 frames":         {tiny, bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), 12)[:300]},
		"a skippable frame":  {withSkip, raw[:2000]},
		"empty frames":       {append(CompressZstd(nil), CompressZstd(nil)...), []byte{}},
		"a single raw block": {append(CompressZstd(raw[:10]), CompressZstd(raw[10:20])...), raw[:20]},
	} {
		if runs := frameRuns(tc.body, maxBodyFrames); len(runs) > maxBodyFrames {
			t.Fatalf("%s: %d runs", name, len(runs))
		}
		var l ledger
		got, err := DecompressFrames(tc.body, int64(len(raw)), &l)
		require.NoError(t, err, name)
		require.Equal(t, len(tc.want), len(got), name)
		require.True(t, bytes.Equal(tc.want, got), name)
		require.LessOrEqual(t, l.held, int64(cap(got))+maxBodyFrames*decoderBytes(MaxBodyWindow), "%s: what is held is the result and the decoders' windows", name)
	}

	// Each run decodes within the limit, but not the whole.
	two := CompressBody(raw)
	require.Greater(t, len(frameRuns(two, maxBodyFrames)), 1)
	_, err := DecompressFrames(two, int64(len(raw)-1), &ledger{})
	require.ErrorIs(t, err, ErrTooLarge)
	// Frames that each decode to the limit: the runs together hold no more than one stream of the
	// body would (twice the limit), and a decoder's window each (each run alone stops at the limit,
	// 72 MiB in all here without the bound on them together).
	const limit = 16 << 20
	bombs := bytes.Repeat(CompressZstd(make([]byte, limit)), maxBodyFrames)
	require.Len(t, frameRuns(bombs, maxBodyFrames), maxBodyFrames)
	var l ledger
	_, err = DecompressFrames(bombs, limit, &l)
	require.ErrorIs(t, err, ErrTooLarge)
	require.LessOrEqual(t, l.peak, 2*int64(limit+1)+maxBodyFrames*decoderBytes(MaxBodyWindow))
	// Garbage after the frames, a truncated frame: malformed, as from a stream.
	for _, bad := range [][]byte{append(slices.Clone(two), "junk"...), two[:len(two)-1], two[:len(two)/2+7]} {
		_, err = DecompressFrames(bad, int64(len(raw)), &ledger{})
		require.ErrorIs(t, err, ErrMalformed)
	}
	// The caller's refusal ends the read and is returned as it is.
	_, err = DecompressFrames(two, int64(len(raw)), &ledger{limit: 64 << 10})
	require.ErrorIs(t, err, errLedger)
}

// The runs decoded at once reserve the largest window their frames declare, not only their first
// frame's: a frame of 10 bytes declaring an 8 MiB window makes the decoder that meets it hold a
// history of 8 MiB, so a run that starts with a small-window frame and goes on with it held 8.5 MiB
// it had not reserved (each run at once, here two). A body that is not whole frames, decoded as one
// stream, reserves the largest window of the frames the stream meets before it fails.
func TestDecompressFrames_ReservesEachRunsLargestWindow(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))       // two runs, each a small frame then a wide one
	small, wide := rawFrame(0, 'a'), rawFrame(13<<3, 'x') // windows of 1 KiB and 8 MiB
	body := slices.Concat(small, wide, small, wide)
	require.Len(t, frameRuns(body, 2), 2)
	var l ledger
	got, err := DecompressFrames(body, 100, &l)
	require.NoError(t, err)
	require.Equal(t, "axax", string(got))
	require.GreaterOrEqual(t, l.total, 2*decoderBytes(MaxBodyWindow), "each run's decoder holds an 8 MiB window")

	l = ledger{}
	_, err = DecompressFrames(slices.Concat(small, wide, []byte("junk")), 100, &l)
	require.ErrorIs(t, err, ErrMalformed)
	require.GreaterOrEqual(t, l.total, decoderBytes(MaxBodyWindow), "the stream's decoder holds an 8 MiB window")
}

// rawFrame is a zstd frame of one raw block holding b, with window descriptor wd (RFC 8878
// §3.1.1.1.2: exponent in the high 5 bits, 1 KiB << exponent) and no content size.
func rawFrame(wd byte, b byte) []byte {
	return []byte{0x28, 0xB5, 0x2F, 0xFD, 0x00, wd, 1<<3 | 1, 0, 0, b} // block: last, raw, 1 byte
}

// Whatever a client sends as a body held whole, decoding its frames at once (DecompressFrames) says
// what decoding it as one stream (DecompressBody) says: the same bytes, or an error of the same
// kind, within the same memory: what is held at once stays within twice the limit and a decoder's
// window per run, and nothing is left reserved but the result and the decoders' windows.
func FuzzDecompressFrames(f *testing.F) {
	raw := make([]byte, 3000)
	for i := range raw {
		raw[i] = byte('a' + i*i%26)
	}
	one, two := CompressZstd(raw[:1500]), CompressZstd(raw[1500:])
	f.Add(slices.Concat(one, two))
	f.Add(slices.Concat(one, declaring(f, two, 9), one))
	f.Add(slices.Concat(rawFrame(0, 'a'), rawFrame(13<<3, 'x'), rawFrame(0, 'b'), rawFrame(31<<3, 'y')))
	f.Add(slices.Concat(CompressZstd(nil), CompressZstd(nil), CompressZstd(nil)))
	f.Add(slices.Concat(one, []byte{0x50, 0x2A, 0x4D, 0x18, 0xFF, 0xFF, 0xFF, 0x7F}, two))
	f.Add(slices.Concat(one, two, []byte("junk")))
	f.Add(bytes.Repeat(CompressZstd(make([]byte, 10000)), 5))
	f.Fuzz(func(t *testing.T, body []byte) {
		const limit = 8000
		var stream, frames ledger
		want, werr := DecompressBody(bytes.NewReader(body), body, limit, &stream)
		got, gerr := DecompressFrames(body, limit, &frames)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("one stream: %v; frames at once: %v", werr, gerr)
		}
		if werr != nil {
			for _, kind := range []error{ErrTooLarge, ErrMalformed} {
				if errors.Is(werr, kind) != errors.Is(gerr, kind) {
					t.Fatalf("one stream: %v; frames at once: %v", werr, gerr)
				}
			}
			return
		}
		if !bytes.Equal(want, got) {
			t.Fatalf("one stream: %d bytes; frames at once: %d bytes, not the same", len(want), len(got))
		}
		if frames.peak > 2*(limit+1)+maxBodyFrames*decoderBytes(MaxBodyWindow)+int64(minBodyBuffer) {
			t.Fatalf("held %d bytes at once", frames.peak)
		}
	})
}

// A body read as a stream (a save's chunks) reserves the decoder's whole window before decoding:
// a small-window first frame may be followed by one of 10 bytes declaring 8 MiB, which the decoder
// allocates when it meets it, after the first chunk was all there was to look at.
func TestDecompressBody_ReservesTheWholeWindowOfAStream(t *testing.T) {
	small, wide := rawFrame(0, 'a'), rawFrame(13<<3, 'x') // windows of 1 KiB and 8 MiB
	body := slices.Concat(small, wide)
	var l ledger
	got, err := DecompressBody(bytes.NewReader(body), small, 100, &l)
	require.NoError(t, err)
	require.Equal(t, "ax", string(got))
	require.GreaterOrEqual(t, l.total, decoderBytes(MaxBodyWindow), "the stream's decoder holds an 8 MiB window")
}
