package codec

import (
	"bytes"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Reads served compressed (the read encoding "zstd", docs/protocol.md §5) are stored frames passed
// through where possible, with the bytes around them compressed here: brackets, commas, and the
// messages of an extent a version cuts short.

// fastEncoder compresses what a read re-encodes: the fastest level (its window is 4 MiB, below
// MaxBodyWindow), one goroutine, and entropy coding of every literal, so that base64 still shrinks.
var fastEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
	zstd.WithAllLitEntropyCompression(true))

// AppendZstdFast appends raw, compressed as one zstd frame at the fastest level, to dst. The frame
// is written apart and then copied: given dst itself and an input that fits one block, the encoder
// keeps a reference to dst after it returns, which kept a whole read's reply alive until the next
// encoding.
func AppendZstdFast(dst, raw []byte) []byte { return append(dst, fastEncoder.EncodeAll(raw, nil)...) }

// BlobFrames returns what a stored blob holds after its header: its zstd frames (compressed true),
// or its raw bytes as they are (compressed false, a blob written without compression). A payload
// that does not start as zstd frames do (a frame or a skippable frame) is refused as malformed, so
// that what is passed through to a reader at least has the shape of zstd.
func BlobFrames(blob []byte) (payload []byte, compressed bool, err error) {
	if compressed, err = BlobCompressed(blob); err != nil {
		return nil, false, err
	}
	payload = blob[HeaderSize:]
	if compressed && !IsZstd(payload) {
		return nil, false, payloadError(ErrMalformed, HeaderSize, "blob payload does not start with a zstd frame")
	}
	return payload, compressed, nil
}

// BlobCompressed checks a blob's header (its first HeaderSize bytes) and says whether its payload
// is compressed.
func BlobCompressed(header []byte) (bool, error) {
	if _, err := BlobPayload(header); err != nil {
		return false, err
	}
	return header[5] == compressionZstd, nil
}

// IsZstd reports whether b starts as zstd frames do: with the magic number of a frame or of a
// skippable frame (RFC 8878 §3.1.1, §3.1.2).
func IsZstd(b []byte) bool { return startsFrame(b) }

// startsFrame reports whether b starts with the magic number of a zstd frame or of a skippable frame
// (RFC 8878 §3.1.1, §3.1.2).
func startsFrame(b []byte) bool {
	if len(b) < 4 {
		return false
	}
	if bytes.Equal(b[:4], []byte{0x28, 0xB5, 0x2F, 0xFD}) {
		return true
	}
	return b[0]&0xF0 == 0x50 && bytes.Equal(b[1:4], []byte{0x2A, 0x4D, 0x18})
}

// DecompressExact decompresses the zstd frames of data, which must decode to exactly size bytes (a
// read reply: its Cp-Raw-Total), with a decoder whose window is capped at MaxBodyWindow. The buffer
// is size+1 bytes, allocated once: a reply that decodes to more is refused without growing it
// (ErrTooLarge), one that decodes to less is refused as malformed, and so is a frame needing a
// larger window. each, if not nil, is given the decoded bytes as the decoder gives them (a zstd
// block, at most 128 KiB, at a time), in order, each run continuing the one before it in the
// buffer returned, so that a caller can hash them while the rest is decoded; a run's bytes are not
// written to again. The frames' checksums (XXH64) are skipped, not checked: every caller checks
// what it decoded against something stronger (the SDK the SHA-256 a read reply names, Cp-Hash;
// ZstdFramePrefix the bytes themselves), and checking both cost a tenth of the decoding's time.
func DecompressExact(data []byte, size int64, each func([]byte)) ([]byte, error) {
	if size < 0 {
		return nil, payloadError(ErrMalformed, -1, "negative decompressed size %d", size)
	}
	dec, _ := replyDecoders.Get().(*zstd.Decoder)
	if dec == nil {
		var err error
		if dec, err = newBodyDecoder(zstd.IgnoreChecksum(true)); err != nil {
			return nil, err
		}
	}
	defer replyDecoders.Put(dec)
	if err := dec.Reset(bytes.NewReader(data)); err != nil {
		return nil, payloadError(ErrMalformed, -1, "zstd: %v", err)
	}
	out, err := decodeExact(dec, size, each)
	_ = dec.Reset(nil)
	return out, err
}

// replyDecoders are the decoders of read replies (the SDK's restores), kept for reuse whatever their
// window (at most MaxBodyWindow): a client restores conversations one after another, and building a
// decoder and its history for each costs more than decoding a small one. Unlike a daemon's
// bodyDecoders, they are not for bytes anyone may send.
var replyDecoders sync.Pool

func decodeExact(r io.Reader, size int64, each func([]byte)) ([]byte, error) {
	out := make([]byte, 0, size+1)
	r = io.LimitReader(r, size+1) // a bomb costs at most size+1 bytes
	given := 0
	for {
		n, err := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if int64(len(out)) > size {
			return nil, payloadError(ErrTooLarge, -1, "decompresses to more than the %d bytes announced", size)
		}
		if each != nil && len(out) > given {
			each(out[given:])
			given = len(out)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, bodyEnd(err)
		}
	}
	if int64(len(out)) != size {
		return nil, payloadError(ErrMalformed, -1, "zstd: decodes to %d bytes, %d announced", len(out), size)
	}
	return out, nil
}
