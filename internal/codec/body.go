package codec

import (
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Reading a body a client sent. Its size is the client's word until it has been read: a chunk count
// times the first chunk, a zstd frame's declared content size, a tiny frame that decompresses to
// gigabytes. So nothing is allocated ahead of the bytes actually read: a body is read into blocks
// that start small and grow as bytes arrive, every allocation is announced to the caller first (who
// may refuse it: a daemon-wide budget), and the zstd decoder's window is capped.

// Growth is told of every buffer a body read allocates, before it is allocated.
type Growth interface {
	// Reserve is called before n more bytes are allocated; an error ends the read and is returned
	// as it is.
	Reserve(n int64) error
	// Release is called with the size of buffers the read no longer uses (blocks once joined).
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
// (ErrTooLarge) and frames that need a window above MaxBodyWindow (ErrMalformed). head is the start
// of the body as received so far (the first chunk): the content size its frame declares is where
// blocks stop rather than overshoot. The decoder's whole window, MaxBodyWindow, is reserved with g
// before decoding: a body read as a stream may go on with frames head does not show, and a frame of
// ten bytes may declare a window of 8 MiB, which the decoder allocates when it meets it. Nothing is
// sized from a declared size ahead of what was decoded. (A body held whole is DecompressFrames',
// which reserves the largest window its frames declare.)
func DecompressBody(r io.Reader, head []byte, maxSize int64, g Growth) ([]byte, error) {
	return decompressWithin(r, head, MaxBodyWindow, maxSize, g)
}

// headWindow is the window the frame head starts with needs (all of MaxBodyWindow when head is too
// short to say).
func headWindow(head []byte) int64 {
	var h zstd.Header
	if h.Decode(head) != nil {
		return MaxBodyWindow
	}
	return bodyWindow(h)
}

// decompressWithin is DecompressBody with the decoder's window reserved for window bytes (at most
// MaxBodyWindow: the decoder refuses more).
func decompressWithin(r io.Reader, head []byte, window, maxSize int64, g Growth) ([]byte, error) {
	declared := int64(-1)
	var h zstd.Header
	if h.Decode(head) == nil && h.HasFCS {
		declared = int64(h.FrameContentSize)
	}
	if err := g.Reserve(decoderBytes(window)); err != nil {
		return nil, err
	}
	dec, err := getBodyDecoder()
	if err != nil {
		return nil, err
	}
	if err := dec.Reset(r); err != nil {
		return nil, payloadError(ErrMalformed, -1, "zstd: %v", err)
	}
	out, err := readGrowing(dec, maxSize, declared, g)
	_ = dec.Reset(nil) // let go of r
	if window <= pooledWindow {
		bodyDecoders.Put(dec)
	} // else its history is dropped with it, not kept for the next small body
	return out, err
}

// bodyWindow is the history a decoder keeps for a frame with header h (single-segment frames keep
// their whole content), capped at what the decoder accepts.
func bodyWindow(h zstd.Header) int64 {
	w := h.WindowSize
	if h.SingleSegment {
		w = h.FrameContentSize
	}
	return int64(min(max(w, zstd.MinWindowSize), MaxBodyWindow))
}

// decoderBytes is what a body decoder holds for a window: the window, room for two blocks beyond it
// and the block decoder's buffers (klauspost/compress/zstd).
func decoderBytes(window int64) int64 { return window + 512<<10 }

// pooledWindow is the largest window of a decoder kept for reuse: the small bodies of most saves.
// A decoder that kept a larger one goes with its history.
const pooledWindow = 1 << 20

// bodyDecoders are the decoders of client bodies, kept apart from those of stored blobs: their
// window is capped at MaxBodyWindow.
var bodyDecoders sync.Pool

func getBodyDecoder() (*zstd.Decoder, error) {
	if dec, _ := bodyDecoders.Get().(*zstd.Decoder); dec != nil {
		return dec, nil
	}
	return newBodyDecoder()
}

// newBodyDecoder makes a decoder whose window is capped at MaxBodyWindow, with the options extra
// besides.
func newBodyDecoder(extra ...zstd.DOption) (*zstd.Decoder, error) {
	opts := append([]zstd.DOption{zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(MaxBodyWindow),
		zstd.WithDecoderMaxMemory(MaxBodyWindow)}, extra...) // in a stream, max memory bounds the window too, not the output
	dec, err := zstd.NewReader(nil, opts...)
	if err != nil {
		return nil, payloadError(ErrMalformed, -1, "zstd: %v", err)
	}
	return dec, nil
}

// readGrowing reads r to its end into blocks that start at minBodyBuffer and double up to
// maxBodyBlock, each reserved with g before it is made: a body refused for its size has cost at
// most maxSize+1 bytes plus one block. A body of more than one block is joined at the end into one
// buffer of its exact size (reserved too), and the blocks released. declared, when known (>= 0), is
// the size the sender announced: once half of it has been read, the blocks move into one buffer of
// that size and the rest is read straight into it (no join: 1.5 times the body at the move, not
// twice); a block never goes past it. A declared size is never believed beyond twice what was read.
func readGrowing(r io.Reader, maxSize, declared int64, g Growth) ([]byte, error) {
	r = io.LimitReader(r, maxSize+1) // a bomb costs at most maxSize+1 bytes
	var blocks [][]byte
	var total, reserved int64
	var probe [1]byte
	for {
		var cur []byte
		if len(blocks) > 0 {
			cur = blocks[len(blocks)-1]
		}
		if len(cur) == cap(cur) {
			// Full: is there more? Read one byte rather than make a block that stays empty.
			n, err := io.ReadFull(r, probe[:])
			if n == 0 {
				if err = bodyEnd(err); err != nil {
					return nil, err
				}
				return join(blocks, total, reserved, g)
			}
			if declared > total && declared <= 2*total && declared <= maxSize && len(blocks) > 1 {
				// Half of the declared size is here: its word is now worth one buffer of that
				// size, at most twice what was read. Move into it, so the body needs no join.
				whole, err := join(blocks, declared, reserved, g)
				if err != nil {
					return nil, err
				}
				blocks, reserved = [][]byte{whole}, declared
				cur = whole
			}
			if len(cur) == cap(cur) {
				size := nextBlock(int64(cap(cur)), total, declared, maxSize)
				if err := g.Reserve(size); err != nil {
					return nil, err
				}
				reserved += size
				cur = make([]byte, 0, size)
				blocks = append(blocks, cur)
			}
			cur = append(cur, probe[0])
			blocks[len(blocks)-1] = cur
			total++
		}
		n, err := r.Read(cur[len(cur):cap(cur)])
		blocks[len(blocks)-1] = cur[:len(cur)+n]
		total += int64(n)
		if total > maxSize {
			return nil, payloadError(ErrTooLarge, -1, "more than %d bytes", maxSize)
		}
		if err != nil {
			if err = bodyEnd(err); err != nil {
				return nil, err
			}
			return join(blocks, total, reserved, g)
		}
	}
}

// maxBodyBlock is the largest block a body is read into.
const maxBodyBlock = 4 << 20

// nextBlock is the size of the block after one of last bytes, with total bytes read: twice the
// last (at least minBodyBuffer, at most maxBodyBlock), but not past the declared size while that
// is still ahead, nor past maxSize+1 in all.
func nextBlock(last, total, declared, maxSize int64) int64 {
	n := min(max(2*last, minBodyBuffer), maxBodyBlock)
	if declared > total {
		n = min(n, declared-total)
	}
	return max(min(n, maxSize+1-total), 1)
}

// join returns the blocks as one buffer with room for size bytes (reserved with g, the blocks'
// reserved bytes then released): the block itself when there is one and it is the size.
func join(blocks [][]byte, size, reserved int64, g Growth) ([]byte, error) {
	switch {
	case len(blocks) == 0:
		return []byte{}, nil
	case len(blocks) == 1 && int64(cap(blocks[0])) >= size:
		return blocks[0], nil
	}
	if err := g.Reserve(size); err != nil {
		return nil, err
	}
	out := make([]byte, 0, size)
	for _, b := range blocks {
		out = append(out, b...)
	}
	g.Release(reserved)
	return out, nil
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
