package snapshot

import (
	"context"
	"errors"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// ReadZstd returns the canonical conversation of v as a zstd stream: concatenated frames whose
// decompression is exactly what Read returns. Where the version's bytes are a stored blob whole (a
// segment the version takes every message of, a value), its frames are passed through as stored,
// undecoded; only what lies between them (brackets, commas, the text around values) and the
// messages of an extent the version cuts short are compressed here, at the fastest level.
//
// Stored frames are not decoded, so their bytes are not checked against v's hash here (lengths
// are): the reader checks the hash of what it decodes (docs/protocol.md §5), as it must anyway.
func ReadZstd(ctx context.Context, st Store, v wire.Version, cache SegmentCache) ([]byte, error) {
	if err := CheckFormat(v); err != nil {
		return nil, err
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var layout Layout
		if layout, err = layoutOf(ctx, st, v); err != nil {
			return nil, err
		}
		var out []byte
		out, err = assembleZstd(ctx, st, layout, v.Counts.Messages, v.RawBytes, cache)
		if errors.Is(err, ErrNotFound) {
			continue // compacted under us: the head now names other segments
		}
		if err != nil {
			return nil, fmt.Errorf("version %d of %s: %w", v.Version, v.Key, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("version %d of %s: %w", v.Version, v.Key, err)
}

// assembleZstd is assemble, compressed: the first n messages of a layout, rawBytes long.
func assembleZstd(ctx context.Context, st Store, l Layout, n int, rawBytes int64, cache SegmentCache) ([]byte, error) {
	z := &zstdBuilder{}
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

// blob adds the bytes of a stored blob that decodes to rawLen bytes: its frames as they are (its raw
// bytes, if it was stored uncompressed).
func (z *zstdBuilder) blob(blob []byte, rawLen int64, id string) error {
	payload, compressed, err := codec.BlobFrames(blob)
	if err != nil {
		return fmt.Errorf("%w: blob %s: %v", ErrCorrupt, id, err)
	}
	if !compressed {
		if int64(len(payload)) != rawLen {
			return fmt.Errorf("%w: blob %s holds %d bytes, its reference says %d", ErrCorrupt, id, len(payload), rawLen)
		}
		z.raw(payload)
		return nil
	}
	z.flush()
	z.out = append(z.out, payload...)
	z.rawLen += rawLen
	return nil
}

// extent adds the first take messages of e's segment, need raw bytes: the segment's blob as it is
// when take is all of it and it has no values; around its values (passed through as stored) when it
// has; else the messages taken, decoded and compressed again.
func (z *zstdBuilder) extent(ctx context.Context, st Store, key wire.Key, e Extent, take int, need int64, cache SegmentCache) error {
	whole := take == e.Segment.Messages
	switch {
	case len(e.Segment.Values) > 0:
		if whole {
			need = e.Segment.RawBytes
		}
		return spliceValues(ctx, st, key, e.Segment, need, z.raw, func(v ValueRef) error {
			blob, err := st.GetSegment(ctx, ValuesKey(key.Namespace), v.segment())
			if errors.Is(err, ErrNotFound) {
				// Values are never replaced (compaction keeps them), so reading again cannot help.
				return fmt.Errorf("%w: value %s of namespace %q (blob %s) is missing: %v", ErrCorrupt, v.ID, key.Namespace, v.Name, err)
			}
			if err != nil {
				return err
			}
			return z.blob(blob, v.RawBytes, "of value "+v.ID)
		})
	case whole:
		blob, err := st.GetSegment(ctx, key, e.Segment)
		if err != nil {
			return err
		}
		return z.blob(blob, e.Segment.RawBytes, e.Segment.ID)
	default:
		pending, err := appendSegmentPrefix(ctx, st, key, e, take, need, z.pending, cache)
		if err != nil {
			return err
		}
		z.pending, z.rawLen = pending, z.rawLen+need
		return nil
	}
}
