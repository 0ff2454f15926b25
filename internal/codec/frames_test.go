package codec

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// skippable is a skippable frame (RFC 8878 §3.1.2) holding n bytes, as an encoder writing padding
// (zstd.WithEncoderPadding) or a user-data frame would.
func skippable(n int) []byte {
	f := make([]byte, 8+n)
	binary.LittleEndian.PutUint32(f, 0x184D2A53)
	binary.LittleEndian.PutUint32(f[4:], uint32(n))
	return f
}

// What a compressed read is built of, checked against klauspost/compress as this module uses it:
// EncodeBlob writes one frame and no skippable frame (its payload is the frame EncodeAll writes);
// stored payloads joined with frames of our own (which may be empty, several, or skippable ones)
// decode as one stream, with a decoder's defaults and with DecompressExact, to the raw bytes joined.
func TestFrames_ConcatenatedPayloadsDecodeAsOneStream(t *testing.T) {
	text := bytes.Repeat([]byte(`{"role":"user","content":"hello"},`), 3000)
	noise := make([]byte, 300<<10)
	_, _ = rand.Read(noise)

	payload, compressed, err := BlobFrames(EncodeBlob(text))
	require.NoError(t, err)
	require.True(t, compressed)
	require.Equal(t, CompressZstd(text), payload, "a blob's payload is one frame, as EncodeAll writes it")
	var h zstd.Header
	require.NoError(t, h.Decode(payload))
	require.False(t, h.Skippable)
	require.LessOrEqual(t, h.WindowSize, uint64(MaxBodyWindow))

	several := append(CompressZstd(noise[:100<<10]), CompressZstd(noise[100<<10:])...) // a payload of two frames
	var stream []byte
	stream = AppendZstdFast(stream, []byte("["))
	stream = append(stream, payload...)
	stream = AppendZstdFast(stream, []byte(","))
	stream = append(stream, skippable(16)...)
	stream = append(stream, several...)
	stream = AppendZstdFast(stream, nil) // an empty frame
	stream = AppendZstdFast(stream, []byte("]"))
	want := append(append(append(append([]byte("["), text...), ','), noise...), ']')

	dec, err := zstd.NewReader(nil)
	require.NoError(t, err)
	defer dec.Close()
	got, err := dec.DecodeAll(stream, nil)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "DecodeAll")
	require.NoError(t, dec.Reset(bytes.NewReader(stream)))
	var streamed bytes.Buffer
	_, err = streamed.ReadFrom(dec)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, streamed.Bytes()), "a stream decoder")

	var pieces [][]byte
	got, err = DecompressExact(stream, int64(len(want)), func(p []byte) { pieces = append(pieces, p) })
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	require.True(t, bytes.Equal(want, bytes.Join(pieces, nil)), "each is given every decoded byte once, in order")
	require.Greater(t, len(pieces), 1, "as the blocks are decoded, not all at the end")
	for _, p := range pieces {
		require.NotEmpty(t, p)
	}
}

// DecompressExact decodes exactly the size announced: more is refused without growing its buffer,
// less is refused, and so is a frame that needs a window beyond MaxBodyWindow.
func TestDecompressExact_RefusesWhatWasNotAnnounced(t *testing.T) {
	raw := bytes.Repeat([]byte("0123456789"), 100_000)
	z := CompressZstd(raw)

	_, err := DecompressExact(z, int64(len(raw))-1, nil)
	require.ErrorIs(t, err, ErrTooLarge, "one byte more than announced")
	_, err = DecompressExact(z, int64(len(raw))+1, nil)
	require.ErrorIs(t, err, ErrMalformed, "one byte fewer")
	_, err = DecompressExact(z[:len(z)/2], int64(len(raw)), nil)
	require.ErrorIs(t, err, ErrMalformed, "truncated")
	_, err = DecompressExact([]byte("not zstd at all"), 10, nil)
	require.ErrorIs(t, err, ErrMalformed)

	// A bomb: 1 GiB of zeros announced as 1 KiB costs 1 KiB + 1 of buffer, not a GiB.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	require.NoError(t, err)
	bomb := enc.EncodeAll(make([]byte, 64<<20), nil)
	_, err = DecompressExact(bomb, 1024, nil)
	require.ErrorIs(t, err, ErrTooLarge)

	var long bytes.Buffer
	w, err := zstd.NewWriter(&long, zstd.WithWindowSize(32<<20), zstd.WithEncoderConcurrency(1))
	require.NoError(t, err)
	big := make([]byte, 40<<20)
	_, _ = rand.Read(big[:1<<20])
	copy(big[39<<20:], big[:1<<20]) // a match 38 MiB back
	_, err = w.Write(big)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	_, err = DecompressExact(long.Bytes(), int64(len(big)), nil)
	require.ErrorIs(t, err, ErrMalformed, "a 32 MiB window is refused")
}

// DecompressExact skips a frame's checksum rather than checking it: its callers check the bytes
// against a stronger hash (a read reply's SHA-256), so a frame whose checksum is wrong but whose
// blocks decode still decodes (and its bytes are then refused, or not, by that hash).
func TestDecompressExact_SkipsFrameChecksums(t *testing.T) {
	raw := bytes.Repeat([]byte(`{"role":"user","content":"hello"},`), 3000)
	z := CompressZstd(raw) // with a checksum: the encoder's default
	z[len(z)-1] ^= 0xff
	got, err := DecompressExact(z, int64(len(raw)), nil)
	require.NoError(t, err)
	require.Equal(t, raw, got)
}

// A blob's payload is handed on only if it starts as zstd frames do.
func TestBlobFrames_RefusesWhatIsNotZstd(t *testing.T) {
	blob := EncodeBlob([]byte(`{"a":1}`))
	blob[HeaderSize] ^= 0xFF
	_, _, err := BlobFrames(blob)
	require.ErrorIs(t, err, ErrMalformed)
	_, _, err = BlobFrames([]byte("CPKT"))
	require.ErrorIs(t, err, ErrMalformed)
}

// The encoder keeps nothing of what AppendZstdFast appended to: a read's whole reply (dst) must not
// stay alive in the shared encoder after the read (klauspost/compress's EncodeAll, given dst,
// kept a reference to it).
func TestAppendZstdFast_KeepsNoReferenceToDst(t *testing.T) {
	freed := make(chan struct{})
	func() {
		dst := make([]byte, 0, 8<<20)
		runtime.SetFinalizer(&dst[:1][0], func(*byte) { close(freed) })
		dst = AppendZstdFast(dst, bytes.Repeat([]byte("abc,"), 1000))
		require.NotEmpty(t, dst)
	}()
	for i := 0; i < 50; i++ {
		runtime.GC()
		select {
		case <-freed:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the buffer appended to is still referenced after AppendZstdFast returned")
}
