package engine

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// A session's messages are one zstd stream, cut at every save: a save's data is what the
// session's encoder emits when flushed after the new messages (a run of zstd blocks, the first
// save's starting with a frame header), so every save is compressed against the whole window
// of what came before it. On the real corpus this stores 1.05× zstd(final conversation), against
// 2.42× for each save compressed alone (docs/format.md §8).
//
// The encoder lives in the daemon's session cache. When it is lost (restart, eviction, a lost
// compare-and-swap) the next save starts a new frame (pieceInfo.Frame): the frame before it is never
// closed with a last block, so a reader closes each frame itself with frameEnd. Frames carry no
// checksum (a version's SHA-256 checks what is read).
//
// A rewrite (a save that changes or drops earlier messages) does not start a frame: the decoder
// decodes every byte of the stream; the log is what the pieces say once each rewrite's Keep has
// cut it (logBuilder).

// frameEnd is an empty raw block flagged last: it ends a frame that was only flushed.
var frameEnd = []byte{0x01, 0x00, 0x00}

// encoder compresses one session's stream.
type encoder struct {
	buf    bytes.Buffer
	z      *zstd.Encoder
	window int  // its pool (recycle)
	fast   bool // its pool (recycle)
}

// newEncoder returns an encoder for a new frame; fast picks zstd.SpeedFastest (Config.FastSaves).
// It comes from encoders when one was given back there: building a zstd encoder allocates ~4 MiB
// (its match tables and a history of twice the window), which took ~1 ms of a first save of
// 19.5 KB, while resetting one costs nothing (docs/format.md §8.15c).
//
// Not SpeedBetterCompression, although it stores the corpus's saves 10% smaller (308,379 B
// against 342,569 B): through the daemon (checkpointbench --only latency, before encoders were
// reused) it made the first save of 19.5 kB 9.2–10.0× the raw operation instead of 5.7–6.1× (a
// larger encoder to make) and an append of 2 messages 3.2–3.4× instead of 3.0× (docs/format.md §8.15d).
func newEncoder(window int, fast bool) (*encoder, error) {
	pool := encoderPool(window, fast)
	if e, ok := pool.Get().(*encoder); ok {
		e.buf.Reset()
		e.z.Reset(&e.buf)
		return e, nil
	}
	e := &encoder{window: window, fast: fast}
	level := zstd.SpeedDefault
	if fast {
		level = zstd.SpeedFastest
	}
	z, err := zstd.NewWriter(&e.buf, zstd.WithEncoderConcurrency(1), zstd.WithAllLitEntropyCompression(true),
		zstd.WithWindowSize(window), zstd.WithEncoderCRC(false), zstd.WithEncoderLevel(level))
	if err != nil {
		return nil, err
	}
	e.z = z
	return e, nil
}

// encoderKey names the encoders that may stand in for one another: same window, same level.
type encoderKey struct {
	window int
	fast   bool
}

// encoders holds idle encoders, a sync.Pool per encoderKey (the garbage collector empties them).
var encoders sync.Map // encoderKey → *sync.Pool

func encoderPool(window int, fast bool) *sync.Pool {
	k := encoderKey{window, fast}
	if p, ok := encoders.Load(k); ok {
		return p.(*sync.Pool)
	}
	p, _ := encoders.LoadOrStore(k, &sync.Pool{})
	return p.(*sync.Pool)
}

// recycle gives e back for a later frame to use. The caller must hold no other reference to it:
// the session that owned it has dropped it (its next save starts a new frame anyway). An encoder
// whose last add failed is not given back (its state is unknown); nil is ignored.
func (e *encoder) recycle() {
	if e == nil {
		return
	}
	e.buf.Reset()
	encoderPool(e.window, e.fast).Put(e)
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

// splitBytes: a piece that starts a frame and holds at least twice this many bytes is compressed
// in two halves at once (addSplit).
const splitBytes = 256 << 10

// addSplit is add for the first bytes of the encoder's frame, on two cores: the first half of p is
// compressed as a whole frame of its own (its last block flagged last) by another encoder, on a
// goroutine, while this one starts its frame with the second half; the stream's bytes for p are
// that whole frame, then this frame's start. Readers decode them as they decode the frames of
// consecutive saves, one after the other (docs/format.md §8.4, §8.15g). Each half compresses without the
// other's history: on the corpus's 599 KB conversation the piece is 5% larger, compressed in
// about half the time; packs compress it again.
func (e *encoder) addSplit(p []byte) ([]byte, error) {
	half := len(p) / 2
	other, err := newEncoder(e.window, e.fast)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- other.whole(p[:half]) }()
	second, err := e.add(p[half:])
	if werr := <-done; err == nil {
		err = werr
	}
	if err != nil {
		return nil, err // other is dropped: its state is unknown
	}
	out := make([]byte, 0, other.buf.Len()+len(second))
	out = append(append(out, other.buf.Bytes()...), second...)
	other.recycle()
	return out, nil
}

// whole compresses p as one whole frame into e.buf.
func (e *encoder) whole(p []byte) error {
	e.buf.Reset()
	if _, err := e.z.Write(p); err != nil {
		return err
	}
	return e.z.Close()
}

// decoder is shared: DecodeAll is safe for concurrent use. Its memory is bounded by the window
// the encoders use and by maxDecoded.
const maxDecoded = 256 << 20

var decoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxDecoded),
	zstd.WithDecoderMaxWindow(8<<20))

// joinStored joins the stored data of consecutive saves, ending each frame before a save that
// starts a new one; the last frame stays open (an open pack's data).
func joinStored(pieces []*pieceInfo, datas [][]byte) []byte {
	var out []byte
	for i, d := range datas {
		if len(out) > 0 && pieces[i].Frame {
			out = append(out, frameEnd...)
		}
		out = append(out, d...)
	}
	return out
}

// compressFrame compresses b as one whole zstd frame at zstd's default level (a value, a bracket).
func compressFrame(b []byte) []byte { return frameEncoder.EncodeAll(b, nil) }

var frameEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithAllLitEntropyCompression(true),
	zstd.WithEncoderCRC(false))

// compressPack compresses a pack's data as one whole zstd frame, at SpeedBetterCompression: a pack
// runs after the save it follows was answered, and on a one-session store every byte it writes
// stays on disk (docs/format.md §8.8). On the corpus's first 256 saves (1.42 MB) it makes the
// frame 10% smaller than the default level (148,694 B against 165,562 B) for ~2× the CPU (6–7 ms
// against 3.6–3.9 ms), and it decodes no slower (docs/format.md §8.15d).
func compressPack(b []byte) []byte { return packEncoder.EncodeAll(b, nil) }

var packEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithAllLitEntropyCompression(true),
	zstd.WithEncoderCRC(false), zstd.WithEncoderLevel(zstd.SpeedBetterCompression))

// empty reports whether a piece adds no bytes: it has no data and belongs to no frame.
func empty(p *pieceInfo, data []byte) bool { return p.RawBytes == 0 && len(data) == 0 && !p.Frame }

// decodeRuns appends to out the decoded data of consecutive save entries (their pieces as
// stored, Keep not applied): each run of entries sharing a frame at once. Empty pieces add
// nothing. out is first grown to hold what the pieces say they hold: the stream's frames declare
// no size, so the decoder would otherwise grow it block by block, copying all it has each time
// (with 50 sessions packing, a pack's decoding spent more time in those copies than in zstd:
// docs/format.md §8.15p). What the pieces say is stored, not received: it is believed up to
// maxPreRatio times the bytes actually read (beyond, the decoder grows the buffer as before).
func decodeRuns(out []byte, pieces []*pieceInfo, datas [][]byte) ([]byte, error) {
	var raw, stored int64
	for i, p := range pieces {
		raw, stored = raw+sizeHint(p.RawBytes), stored+int64(len(datas[i]))
	}
	out = slices.Grow(out, int(min(sizeHint(raw), maxPreRatio*stored)))
	for start := 0; start < len(pieces); {
		if empty(pieces[start], datas[start]) {
			start++
			continue
		}
		if !pieces[start].Frame {
			return nil, fmt.Errorf("%w: a run of saves that does not start a frame", ErrCorrupt)
		}
		end := start + 1
		for end < len(pieces) && !pieces[end].Frame {
			end++
		}
		var stored int
		for i := start; i < end; i++ {
			stored += len(datas[i])
		}
		stream := make([]byte, 0, stored+len(frameEnd))
		var raw int64
		for i := start; i < end; i++ {
			stream = append(stream, datas[i]...)
			raw += pieces[i].RawBytes // each at most maxDecoded (decodeEntry): no overflow
		}
		if raw > maxDecoded {
			return nil, fmt.Errorf("%w: saves claim %d bytes, more than a read decodes (%d)", ErrCorrupt, raw, maxDecoded)
		}
		n := len(out)
		var err error
		if out, err = decoder.DecodeAll(append(stream, frameEnd...), out); err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
		}
		if int64(len(out)-n) != raw {
			return nil, fmt.Errorf("%w: saves decode to %d bytes, their pieces say %d", ErrCorrupt, len(out)-n, raw)
		}
		start = end
	}
	return out, nil
}

// maxPreRatio bounds decodeRuns' buffer before decoding: conversations compress ~7× (the corpus),
// so a buffer this many times the stored bytes holds any ordinary run.
const maxPreRatio = 64

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sizeHint bounds a buffer's capacity taken from stored sizes: a corrupt size must not allocate
// more than a read can decode (the decoder refuses more than maxDecoded), nor a negative one.
func sizeHint(n int64) int64 { return max(0, min(n, maxDecoded)) }

// logBuilder rebuilds a session's log (its messages joined by ",") from its save and pack
// entries, in subject order: the data of a run of entries sharing a frame is decoded at once,
// then each piece is checked against its CRC-32C and appended, after cutting the log to its Keep
// on a rewrite. Runs without rewrites are decoded straight onto the log's buffer, which has room
// to spare: the decoder's fast path needs it (decoding into a buffer of the exact size takes its
// "safe" path, ~25% slower here).
type logBuilder struct {
	// partial: the last run's data holds more than its pieces (a pack read up to one of its
	// versions); the rest is decoded and dropped.
	partial bool
	closed  bool   // the last data queued ends its frame (a pack's): no frameEnd to add
	out     []byte // "[" then the log: a restore adds "]" and has the conversation, copied never
	data    [][]byte
	pieces  []*pieceInfo
	// fetch returns a value a piece lists (values.go).
	fetch func(valueRef) ([]byte, error)
}

// add queues a save entry's piece; a piece that starts a frame first finishes the run before it.
func (lb *logBuilder) add(p *pieceInfo, data []byte) error {
	if empty(p, data) {
		if p.CRC != 0 { // CRC-32C of nothing
			return fmt.Errorf("%w: an empty piece with a CRC-32C of %#x", ErrCorrupt, p.CRC)
		}
		if len(lb.pieces) == 0 {
			return lb.keep(p.Keep) // no run to join: nothing to decode
		}
		lb.pieces, lb.data = append(lb.pieces, p), append(lb.data, nil) // the run's frame state is unchanged
		return nil
	}
	if p.Frame {
		if err := lb.flush(); err != nil {
			return err
		}
	} else if len(lb.pieces) == 0 && len(lb.out) <= 1 {
		return fmt.Errorf("%w: the first save entry does not start a frame", ErrCorrupt)
	}
	lb.pieces, lb.data, lb.closed = append(lb.pieces, p), append(lb.data, data), false
	return nil
}

// addPack queues a pack: one whole frame, or (open) its saves' stored bytes, which the saves
// after it may continue (pack.go).
func (lb *logBuilder) addPack(packed []packedVersion, data []byte, open bool) error {
	if allEmpty(packed) { // saves that added nothing (or the first of a pack read up to one)
		for i := range packed {
			p := packed[i].Piece
			p.Frame = false
			if err := lb.add(&p, nil); err != nil {
				return err
			}
		}
		return nil
	}
	if startsFrame(packed) {
		if err := lb.flush(); err != nil {
			return err
		}
	} else if len(lb.pieces) == 0 && len(lb.out) <= 1 {
		return fmt.Errorf("%w: the first pack does not start a frame", ErrCorrupt)
	}
	for i := range packed {
		lb.pieces = append(lb.pieces, &packed[i].Piece)
	}
	lb.data, lb.closed = append(lb.data, data), !open
	return nil
}

// allEmpty reports whether no piece of a pack adds bytes.
func allEmpty(packed []packedVersion) bool {
	for _, p := range packed {
		if p.Piece.RawBytes > 0 {
			return false
		}
	}
	return true
}

// startsFrame reports whether a pack's data starts a frame: its first piece that is not empty does.
func startsFrame(packed []packedVersion) bool {
	for _, p := range packed {
		if p.Piece.RawBytes > 0 || p.Piece.Frame {
			return p.Piece.Frame
		}
	}
	return false
}

// flush decodes the queued run and applies its pieces.
func (lb *logBuilder) flush() error {
	if len(lb.pieces) == 0 {
		return nil
	}
	var stored, raw int64
	for _, d := range lb.data {
		stored += int64(len(d))
	}
	rewrites := false
	for _, p := range lb.pieces {
		raw += p.RawBytes // each at most maxDecoded (decodeEntry): no overflow
		rewrites = rewrites || p.Keep != nil || len(p.Values) > 0
	}
	if raw > maxDecoded {
		return fmt.Errorf("%w: %d saves claim %d bytes, more than a read decodes (%d)", ErrCorrupt, len(lb.pieces), raw, maxDecoded)
	}
	stream := make([]byte, 0, stored+int64(len(frameEnd)))
	for _, d := range lb.data {
		stream = append(stream, d...)
	}
	if !lb.closed {
		stream = append(stream, frameEnd...)
	}
	pieces := make([]pieceInfo, len(lb.pieces))
	for i, p := range lb.pieces {
		pieces[i] = *p
	}
	lb.pieces, lb.data = lb.pieces[:0], lb.data[:0]

	if !rewrites && !lb.partial { // the common case: decode straight onto the log
		n := len(lb.out)
		out, err := decoder.DecodeAll(stream, lb.out)
		if err != nil {
			return fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
		}
		if int64(len(out)-n) != raw {
			return fmt.Errorf("%w: %d saves decode to %d bytes, their pieces say %d", ErrCorrupt, len(pieces), len(out)-n, raw)
		}
		lb.out = out
		return checkPieces(out[n:], pieces)
	}
	plain, err := decoder.DecodeAll(stream, make([]byte, 0, sizeHint(decodedSize(stream, raw)+64)))
	if err != nil {
		return fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
	}
	if lb.partial && int64(len(plain)) > raw {
		plain = plain[:raw]
	}
	if int64(len(plain)) != raw {
		return fmt.Errorf("%w: %d saves decode to %d bytes, their pieces say %d", ErrCorrupt, len(pieces), len(plain), raw)
	}
	if err := checkPieces(plain, pieces); err != nil {
		return err
	}
	for _, p := range pieces {
		if err := lb.keep(p.Keep); err != nil {
			return err
		}
		if len(p.Values) == 0 {
			lb.out = append(lb.out, plain[:p.RawBytes]...)
		} else if lb.out, err = splice(lb.out, plain[:p.RawBytes], p.Values, lb.fetch); err != nil {
			return err
		}
		plain = plain[p.RawBytes:]
	}
	return nil
}

// decodedSize is what a stream whose pieces hold raw bytes decodes to, for its buffer: more when
// it is a pack read up to one of its versions, whose frame declares its whole size (a buffer
// that has to grow while decoding is copied each time). A declared size above maxDecoded is
// bounded by sizeHint; the decoder refuses to go beyond it.
func decodedSize(stream []byte, raw int64) int64 {
	var h zstd.Header
	if h.Decode(stream) == nil && h.HasFCS && int64(h.FrameContentSize) > raw {
		return int64(min(h.FrameContentSize, maxDecoded))
	}
	return raw
}

// checkPieces checks each piece of plain (their bytes in order) against its CRC-32C.
func checkPieces(plain []byte, pieces []pieceInfo) error {
	for _, p := range pieces {
		if crc32.Checksum(plain[:p.RawBytes], castagnoli) != p.CRC {
			return fmt.Errorf("%w: a piece of %d bytes does not match its CRC-32C", ErrCorrupt, p.RawBytes)
		}
		plain = plain[p.RawBytes:]
	}
	return nil
}

// keep cuts the log to its first n bytes (a rewrite; nil: an append).
func (lb *logBuilder) keep(n *int64) error {
	if n == nil {
		return nil
	}
	if *n < 0 || *n > int64(len(lb.out)-1) {
		return fmt.Errorf("%w: a rewrite keeps %d bytes of a log of %d", ErrCorrupt, *n, len(lb.out)-1)
	}
	lb.out = lb.out[:1+*n]
	return nil
}

// result finishes the last run and returns "[" followed by the log.
func (lb *logBuilder) result() ([]byte, error) {
	err := lb.flush()
	return lb.out, err
}
