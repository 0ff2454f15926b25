package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// ReadZstd returns the canonical conversation of v as a zstd stream: concatenated frames whose
// decompression is exactly what Read returns. Where the version's bytes are a stored blob whole (a
// segment the version takes every message of, a value), its frames are passed through as stored,
// undecoded; of a segment the version takes only the first messages of, the stored blocks before
// the cut are; only what lies between them (brackets, commas, the text around values, the rest of
// a cut segment) is compressed here, at the fastest level.
//
// Stored frames are not decoded, so their bytes are not checked against v's hash here (lengths
// are): the reader checks the hash of what it decodes (docs/protocol.md §5), as it must anyway.
func ReadZstd(ctx context.Context, st Store, v wire.Version, cache SegmentCache) ([]byte, error) {
	return readLayout(ctx, st, v, func(l Layout) ([]byte, error) {
		return assembleZstd(ctx, st, l, v.Counts.Messages, v.RawBytes, cache)
	})
}

// assembleZstd is assemble, compressed: the first n messages of a layout, rawBytes long.
func assembleZstd(ctx context.Context, st Store, l Layout, n int, rawBytes int64, cache SegmentCache) ([]byte, error) {
	// No more than any stream of rawBytes needs, whatever the references say.
	z := &zstdBuilder{out: make([]byte, 0, min(zstdSizeHint(l, n), rawBytes+rawBytes/128+64<<10))}
	z.raw([]byte{'['})
	have := 0
	for _, e := range l.Extents {
		if have == n {
			break
		}
		take := min(e.Count, n-have)
		if have > 0 {
			z.raw([]byte{','})
		}
		need := e.RawBytes // as in assemble
		if take < e.Count {
			need = rawBytes - 1 - z.rawLen
		}
		if err := z.extent(ctx, st, l.Key, e, take, need, cache); err != nil {
			return nil, err
		}
		have += take
	}
	if have != n {
		return nil, fmt.Errorf("%w: generation %d holds %d messages, wanted %d", ErrCorrupt, l.Gen, have, n)
	}
	z.raw([]byte{']'})
	z.flush()
	if z.rawLen != rawBytes {
		return nil, fmt.Errorf("%w: its extents add up to %d bytes, its record says %d", ErrCorrupt, z.rawLen, rawBytes)
	}
	return z.out, nil
}

// zstdSizeHint guesses the length of the stream of the first n messages of a layout, so that it is
// allocated once: the stored sizes of the blobs it passes through, a third of what it compresses.
func zstdSizeHint(l Layout, n int) int64 {
	hint, have := int64(1024), 0
	for _, e := range l.Extents {
		if have >= n {
			break
		}
		if min(e.Count, n-have) == e.Segment.Messages {
			hint += e.Segment.StoredBytes
			for _, v := range e.Segment.Values {
				hint += v.StoredBytes
			}
		} else {
			hint += e.RawBytes / 3
		}
		have += e.Count
	}
	return hint
}

// zstdBuilder writes a zstd stream: stored frames as they are, raw bytes gathered until the next
// stored frames (or the end) and then compressed as one frame.
type zstdBuilder struct {
	out     []byte // the stream so far
	pending []byte // raw bytes not yet compressed
	rawLen  int64  // the raw bytes the stream decodes to, pending ones included
}

func (z *zstdBuilder) raw(p []byte) {
	z.pending = append(z.pending, p...)
	z.rawLen += int64(len(p))
}

func (z *zstdBuilder) flush() {
	if len(z.pending) > 0 {
		z.out = codec.AppendZstdFast(z.out, z.pending)
		z.pending = z.pending[:0]
	}
}

// blob adds the bytes of a stored blob (ref: a segment's or a value's) that decodes to ref.RawBytes
// bytes: its frames as they are (its raw bytes, if it was stored uncompressed), read piece by piece
// straight onto the stream, so that no copy of the blob is held beside it.
func (z *zstdBuilder) blob(ctx context.Context, st Store, key wire.Key, ref SegmentRef, what string) error {
	r := &errReader{r: st.OpenSegment(ctx, key, ref)}
	var header [codec.HeaderSize]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		if r.err != nil {
			return r.err // storage (a segment compacted away: ErrNotFound)
		}
		return fmt.Errorf("%w: %s %s: blob header: %v", ErrCorrupt, what, ref.ID, err)
	}
	compressed, err := codec.BlobCompressed(header[:])
	if err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrCorrupt, what, ref.ID, err)
	}
	if !compressed {
		start := len(z.pending)
		z.pending, err = appendAll(z.pending, r, ref.RawBytes)
		if err == nil && int64(len(z.pending)-start) != ref.RawBytes {
			err = fmt.Errorf("%w: %s %s holds %d bytes, its reference says %d", ErrCorrupt, what, ref.ID, len(z.pending)-start, ref.RawBytes)
		}
		z.rawLen += ref.RawBytes
		return errOf(r, err)
	}
	z.flush()
	start := len(z.out)
	// Compressed, a blob is at most its raw length and a little (incompressible blocks are stored).
	z.out, err = appendAll(z.out, r, ref.RawBytes+ref.RawBytes/128+1024)
	if err == nil && !codec.IsZstd(z.out[start:]) {
		err = fmt.Errorf("%w: %s %s: its payload does not start with a zstd frame", ErrCorrupt, what, ref.ID)
	}
	z.rawLen += ref.RawBytes
	return errOf(r, err)
}

// errOf prefers the error of storage, which r kept, to what reading its bytes made of it.
func errOf(r *errReader, err error) error {
	if r.err != nil {
		return r.err
	}
	return err
}

// appendAll appends what r holds to dst, refusing more than limit bytes.
func appendAll(dst []byte, r io.Reader, limit int64) ([]byte, error) {
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			dst = slices.Grow(dst, 64<<10)
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if int64(len(dst)-start) > limit {
			return dst, fmt.Errorf("%w: a blob holds more than the %d bytes it can", ErrCorrupt, limit)
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// extent adds the first take messages of e's segment, need raw bytes: the segment's blob as it is
// when take is all of it and it has no values; around its values (passed through as stored) when it
// has; else cut short (cut).
func (z *zstdBuilder) extent(ctx context.Context, st Store, key wire.Key, e Extent, take int, need int64, cache SegmentCache) error {
	whole := take == e.Segment.Messages
	switch {
	case len(e.Segment.Values) > 0:
		if whole {
			need = e.Segment.RawBytes
		}
		return spliceValues(ctx, st, key, e.Segment, need, z.raw, func(v ValueRef) error {
			err := z.blob(ctx, st, ValuesKey(key.Namespace), v.segment(), "value blob")
			if errors.Is(err, ErrNotFound) {
				// Values are never replaced (compaction keeps them), so reading again cannot help.
				return fmt.Errorf("%w: value %s of namespace %q (blob %s) is missing: %v", ErrCorrupt, v.ID, key.Namespace, v.Name, err)
			}
			return err
		})
	case whole:
		return z.blob(ctx, st, key, e.Segment, "segment")
	default:
		return z.cut(ctx, st, key, e, take, need, cache)
	}
}

// cutFramesFrom is the length of a cut from which cut looks for whole stored blocks to pass
// through: below it, compressing the bytes again costs less than fetching the blob to look.
const cutFramesFrom = 256 << 10

// cut adds the first need raw bytes of e's segment, which a version takes only part of: the stored
// frame's whole blocks before the cut as they are (codec.ZstdFramePrefix), then the rest of the
// bytes compressed again.
func (z *zstdBuilder) cut(ctx context.Context, st Store, key wire.Key, e Extent, take int, need int64, cache SegmentCache) error {
	raw, err := readSegment(ctx, st, key, e.Segment, cache)
	if err != nil {
		return err
	}
	if need < 0 || need > int64(len(raw)) || need < int64(len(raw)) && raw[need] != ',' {
		return fmt.Errorf("%w: segment %s: the first %d of its messages are not %d bytes", ErrCorrupt, e.Segment.ID, take, need)
	}
	done := 0
	if need >= cutFramesFrom {
		blob, err := st.GetSegment(ctx, key, e.Segment)
		if err != nil {
			return err
		}
		if payload, compressed, err := codec.BlobFrames(blob); err == nil && compressed {
			if frame, prefix, ok := codec.ZstdFramePrefix(payload, raw, int(need)); ok {
				z.flush()
				z.out = append(z.out, frame...)
				z.rawLen += int64(prefix)
				done = prefix
			}
		}
	}
	z.raw(raw[done:need])
	return nil
}
