package codec

import (
	"bytes"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// FormatVersion is the format of conversations (Cp-Format) and of stored blobs this code writes.
const FormatVersion = 1

// A stored blob: 4 magic bytes, the format version, the compression, 2 reserved bytes, the payload.
const (
	HeaderSize      = 8
	compressionNone = 0
	compressionZstd = 1
)

var magic = [4]byte{'C', 'P', 'K', 'T'}

// encoderOptions are those of every blob and body compressed: the default level, one goroutine, and
// entropy coding of literals even where no match is found, which the default level skips: base64
// (inline images) has no matches, but six bits of entropy per byte, so it compresses to 75%.
var encoderOptions = []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1), zstd.WithAllLitEntropyCompression(true)}

// The encoder is built once: EncodeAll is safe for concurrent use, and building an encoder costs
// far more than using it.
var encoder, _ = zstd.NewWriter(nil, encoderOptions...)

// CheckFormatVersion refuses a format version other than FormatVersion.
func CheckFormatVersion(v int) error {
	if v == FormatVersion {
		return nil
	}
	return payloadError(ErrUnknownFormatVersion, -1, "format version %d (this checkpointd reads version %d)", v, FormatVersion)
}

// EncodeBlob frames raw as a stored blob: header, then zstd.
func EncodeBlob(raw []byte) []byte {
	// Sized for the worst case (incompressible images): growing a 64 MiB buffer by doubling would
	// hold two copies at once.
	out := make([]byte, HeaderSize, HeaderSize+encoder.MaxEncodedSize(len(raw)))
	copy(out, magic[:])
	out[4], out[5] = FormatVersion, compressionZstd
	return encoder.EncodeAll(raw, out)
}

// BlobPayload checks a blob's header and returns the bytes after it (the zstd frames as stored).
func BlobPayload(blob []byte) ([]byte, error) {
	if len(blob) < HeaderSize || !bytes.Equal(blob[:4], magic[:]) {
		return nil, payloadError(ErrMalformed, 0, "not a checkpointd blob (bad magic)")
	}
	if blob[4] != FormatVersion {
		return nil, payloadError(ErrUnknownFormatVersion, 4, "blob format version %d (this checkpointd reads version %d)", blob[4], FormatVersion)
	}
	if blob[5] != compressionZstd && blob[5] != compressionNone {
		return nil, payloadError(ErrUnknownFormatVersion, 5, "blob compression %d (want 0 none or 1 zstd)", blob[5])
	}
	return blob[HeaderSize:], nil
}

// DecodeBlob returns the raw bytes of a stored blob, refusing to produce more than maxSize bytes.
func DecodeBlob(blob []byte, maxSize int64) ([]byte, error) {
	payload, err := BlobPayload(blob)
	if err != nil {
		return nil, err
	}
	if blob[5] == compressionNone {
		if int64(len(payload)) > maxSize {
			return nil, payloadError(ErrTooLarge, -1, "blob holds %d bytes, more than the %d expected", len(payload), maxSize)
		}
		return payload, nil
	}
	return DecompressZstd(payload, maxSize)
}

// CompressZstd compresses raw as one zstd frame (the wire encoding "zstd").
func CompressZstd(raw []byte) []byte { return encoder.EncodeAll(raw, nil) }

// CompressBody compresses the body of a save for the wire (the encoding "zstd") at zstd's fastest
// level: one frame, or, from 2 × BodyFrameBytes up to maxFramedBody, consecutive parts of raw compressed at once on
// as many goroutines (at most maxBodyFrames, and GOMAXPROCS), their frames concatenated, which every
// zstd decoder decodes as the whole (RFC 8878 §3.1). The SDK's save waits for its body, and the
// daemon compresses what it stores again: on the corpus's 599 KB conversation the fastest level
// takes 2.0 ms instead of 2.3–2.5 ms (110,149 B instead of 103,118 B; decoding it costs about the
// same), and two frames at once 1.05 ms on this 2-core machine when the other core is free
// (114,834 B); 19.5 KB, 50 µs instead of 81 µs (4,891 B instead of 4,658 B). The first part is the
// largest, so the first frame's header says the largest window a decoder needs (DecompressBody
// reserves it).
func CompressBody(raw []byte) []byte {
	enc := bodyEncoder()
	n := min(len(raw)/BodyFrameBytes, maxBodyFrames, runtime.GOMAXPROCS(0))
	if n < 2 || len(raw) > maxFramedBody {
		return enc.EncodeAll(raw, nil)
	}
	rest := len(raw) / n
	first := len(raw) - rest*(n-1)
	frames := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		from := 0
		if i > 0 {
			from = first + (i-1)*rest
		}
		part := raw[from : first+i*rest]
		wg.Go(func() { frames[i] = enc.EncodeAll(part, nil) })
	}
	wg.Wait()
	return bytes.Join(frames, nil)
}

// BodyFrameBytes is the least a body's frame holds when CompressBody cuts it (below it, the
// goroutines cost more than they save, and each frame compresses without the others' history).
const BodyFrameBytes = 256 << 10

// maxFramedBody is the largest body CompressBody cuts into frames. A larger one is sent in chunks,
// which the daemon decodes as one stream (DecompressBody): one frame declares the whole body's size,
// so the daemon reads it into one buffer once half of it is there; frames each declaring a part of
// it make the daemon join blocks into the body at the end, holding it twice (checkpointbench's
// 64 MiB checkpoint: a daemon peak of 3.04× its size instead of 2.53×).
const maxFramedBody = 8 << 20

// maxBodyFrames bounds the frames of one body, and so the encoders bodyEncoder keeps.
const maxBodyFrames = 4

// bodyEncoder is the encoder of CompressBody's frames, made on first use (a daemon never uses it):
// the fastest level, entropy coding of literals as encoderOptions says, one encoder state per frame
// compressed at once.
var bodyEncoder = sync.OnceValue(func() *zstd.Encoder {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithAllLitEntropyCompression(true),
		zstd.WithEncoderConcurrency(min(maxBodyFrames, runtime.GOMAXPROCS(0))))
	return enc
})

// DecompressZstd decompresses one or more concatenated zstd frames, refusing to produce more than
// maxSize bytes: output is read through a limit, so a decompression bomb costs at most maxSize+1
// bytes of memory, never what it claims.
func DecompressZstd(data []byte, maxSize int64) ([]byte, error) {
	return DecompressZstdFrom(bytes.NewReader(data), FrameContentSize(data), maxSize)
}

// decoders are streaming zstd decoders for reuse: building one costs far more than resetting it.
var decoders sync.Pool
