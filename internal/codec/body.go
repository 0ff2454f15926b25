package codec

import (
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Reading a body a client sent. Its size is the client's word until it has been read: a chunk count
// times the first chunk, a zstd frame's declared content size, a tiny frame that decompresses to
// gigabytes. So nothing is allocated ahead of the bytes actually read: the buffer starts small and
// doubles as bytes arrive, every allocation is announced to the caller first (who may refuse it:
// a daemon-wide budget), and the zstd decoder's window is capped.

// Growth is told of every buffer a body read allocates, before it is allocated.
type Growth interface {
	// Reserve is called before n more bytes are allocated; an error ends the read and is returned
	// as it is.
	Reserve(n int64) error
	// Release is called with the size of a buffer the read outgrew and dropped.
	Release(n int64)
}

// MaxBodyWindow is the largest zstd window a body may need (the history a decoder keeps), 8 MiB:
// RFC 8878 recommends decoders support at least that, and this package's encoder never uses more.
// A frame needing more (zstd --long, --ultra) is refused rather than making every decoder hold it.
const MaxBodyWindow = 8 << 20

// minBodyBuffer is the first buffer of a body read: small, as most saves are.
const minBodyBuffer = 16 << 10

// ReadBody reads r to its end, refusing more than maxSize bytes (ErrTooLarge).
func ReadBody(r io.Reader, maxSize int64, g Growth) ([]byte, error) {
	return readGrowing(r, maxSize, -1, g)
}

// DecompressBody decompresses the zstd frames r reads, refusing more than maxSize bytes of output
// (ErrTooLarge) and frames that need a window above MaxBodyWindow (ErrMalformed). declared is the
// first frame's declared content size (FrameContentSize, -1 if none): the buffer stops growing
// there rather than overshoot, but is never sized from it ahead of what was decoded.
func DecompressBody(r io.Reader, declared, maxSize int64, g Growth) ([]byte, error) {
	dec, err := getBodyDecoder()
	if err != nil {
		return nil, err
	}
	defer bodyDecoders.Put(dec)
	if err := dec.Reset(r); err != nil {
		return nil, payloadError(ErrMalformed, -1, "zstd: %v", err)
	}
	defer func() { _ = dec.Reset(nil) }() // let go of r
	return readGrowing(dec, maxSize, declared, g)
}

// bodyDecoders are the decoders of client bodies, kept apart from those of stored blobs: their
// window is capped at MaxBodyWindow, so each holds at most that much history between uses.
var bodyDecoders sync.Pool

func getBodyDecoder() (*zstd.Decoder, error) {
	if dec, _ := bodyDecoders.Get().(*zstd.Decoder); dec != nil {
		return dec, nil
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(MaxBodyWindow),
		zstd.WithDecoderMaxMemory(MaxBodyWindow)) // in a stream, max memory bounds the window too, not the output
	if err != nil {
		return nil, payloadError(ErrMalformed, -1, "zstd: %v", err)
	}
	return dec, nil
}

// readGrowing reads r to its end into a buffer that starts at minBodyBuffer and doubles when full,
// never past maxSize+1 nor (when known, >= 0) past declared: a body the size it said it was fits
// its last buffer exactly. Each new buffer is reserved with g before it is made, and the one it
// replaces released.
func readGrowing(r io.Reader, maxSize, declared int64, g Growth) ([]byte, error) {
	r = io.LimitReader(r, maxSize+1) // a bomb costs at most maxSize+1 bytes
	var buf []byte
	var probe [1]byte
	for {
		if len(buf) == cap(buf) {
			// Full: is there more? Read one byte rather than grow a buffer that was exactly right.
			n, err := io.ReadFull(r, probe[:])
			if n == 0 {
				return buf, bodyEnd(err)
			}
			grown := nextBuffer(int64(len(buf)), declared, maxSize)
			if err := g.Reserve(grown); err != nil {
				return nil, err
			}
			next := make([]byte, len(buf), grown)
			copy(next, buf)
			g.Release(int64(cap(buf)))
			buf = append(next, probe[0])
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > maxSize {
			return nil, payloadError(ErrTooLarge, -1, "more than %d bytes", maxSize)
		}
		if err != nil {
			return buf, bodyEnd(err)
		}
	}
}

// nextBuffer is the capacity after have bytes: twice as much (at least minBodyBuffer), but not past
// the declared size when that is still ahead, and never past maxSize+1.
func nextBuffer(have, declared, maxSize int64) int64 {
	n := max(2*have, minBodyBuffer)
	if declared > have {
		n = min(n, declared)
	}
	return max(min(n, maxSize+1), have+1)
}

// bodyEnd turns the error that ended a read into the read's outcome: nil at the end of the body.
func bodyEnd(err error) error {
	switch {
	case err == nil, errors.Is(err, io.EOF):
		return nil
	case errors.Is(err, io.ErrUnexpectedEOF):
		return payloadError(ErrMalformed, -1, "truncated: %v", err)
	case errors.Is(err, zstd.ErrWindowSizeExceeded), errors.Is(err, zstd.ErrDecoderSizeExceeded):
		return payloadError(ErrMalformed, -1, "zstd: %v (a body's frames may need a window of at most %d bytes)", err, MaxBodyWindow)
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		return err
	}
	return payloadError(ErrMalformed, -1, "reading: %v", err)
}
