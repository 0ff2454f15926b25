package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// ErrCorrupt reports stored bytes that do not match the hash their version recorded.
var ErrCorrupt = errors.New("stored checkpoint does not match its hash")

// GetVersion returns version n of key, or its head when n is 0. cache, if not nil, keeps archives
// of version records between calls. An ErrNotFound for a version n names it: "version n: ...".
func GetVersion(ctx context.Context, st Store, key Key, n uint64, cache SegmentCache) (Version, error) {
	v, err := getVersion(ctx, st, key, n, cache)
	if n != 0 && errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("version %d: %w", n, err)
	}
	return v, err
}

func getVersion(ctx context.Context, st Store, key Key, n uint64, cache SegmentCache) (Version, error) {
	head, _, err := st.Head(ctx, key)
	if err != nil {
		return Version{}, err
	}
	if !head.Exists() {
		return Version{}, fmt.Errorf("%w: the session is leased but has no version yet", ErrNotFound)
	}
	if n == 0 || n == head.Version.Version {
		return head.Version, nil
	}
	if n > head.Version.Version {
		return Version{}, fmt.Errorf("%w (the head is version %d)", ErrNotFound, head.Version.Version)
	}
	if n < head.first() {
		return Version{}, fmt.Errorf("%w (pruned by retention; the oldest kept is version %d)", ErrNotFound, head.first())
	}
	v, err := st.Version(ctx, key, n)
	if !errors.Is(err, ErrNotFound) {
		return v, err
	}
	if v, err = findVersion(ctx, st, head, n, cache); !errors.Is(err, ErrNotFound) {
		return v, err
	}
	// Archived after we read the head: the new head names the archive.
	if head, _, err = st.Head(ctx, key); err != nil {
		return Version{}, err
	}
	return findVersion(ctx, st, head, n, cache)
}

// CheckFormat refuses a version record written in a format this code does not know.
func CheckFormat(v Version) error {
	if v.Format != VersionFormat {
		return fmt.Errorf("version %d of %s: %w", v.Version, v.Key,
			&codec.ValidationError{Err: codec.ErrUnknownFormatVersion, Index: -1, Offset: -1,
				Detail: fmt.Sprintf("record format %d (this checkpointd reads format %d)", v.Format, VersionFormat)})
	}
	return nil
}

// SegmentCache keeps decoded segments between reads; nil means no cache.
type SegmentCache interface {
	GetOrLoad(id string, load func() ([]byte, error)) ([]byte, error)
}

// Read returns the canonical conversation of v, verified against v's hash. A read that races a
// compaction (which replaces segments) starts again from the new layout.
func Read(ctx context.Context, st Store, v Version, cache SegmentCache) ([]byte, error) {
	out, err := readLayout(ctx, st, v, func(l Layout) ([]byte, error) {
		return assemble(ctx, st, l, v.Counts.Messages, v.RawBytes, cache)
	})
	if err != nil {
		return nil, err
	}
	return out, Verify(v, out)
}

// readLayout checks v's format, then builds its bytes from the layout of its generation with build,
// starting again from the layout (up to three times) when build finds a segment gone: a compaction
// replaced it under the read.
func readLayout(ctx context.Context, st Store, v Version, build func(Layout) ([]byte, error)) ([]byte, error) {
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
		out, err = build(layout)
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

// layoutOf returns the layout of the generation holding v.
func layoutOf(ctx context.Context, st Store, v Version) (Layout, error) {
	head, _, err := st.Head(ctx, v.Key)
	if err != nil {
		return Layout{}, err
	}
	if head.Layout.Gen == v.Gen {
		return head.Layout, nil
	}
	return st.Layout(ctx, v.Key, v.Gen)
}

// assemble builds the canonical conversation of the first n messages of a layout in one buffer of
// size rawBytes: extents are copied as they are (one cut short ends where the version does).
func assemble(ctx context.Context, st Store, l Layout, n int, rawBytes int64, cache SegmentCache) ([]byte, error) {
	out := make([]byte, 0, rawBytes)
	out = append(out, '[')
	have := 0
	for _, e := range l.Extents {
		if have == n {
			break
		}
		take := min(e.Count, n-have)
		if have > 0 {
			out = append(out, ',')
		}
		if take == e.Segment.Messages && (e.Segment.RawBytes >= StreamBytes || len(e.Segment.Values) > 0) {
			// Large and whole: decode it straight into out, piece by piece, past the cache.
			var err error
			if out, err = appendRaw(ctx, st, l.Key, e.Segment, out); err != nil {
				return nil, err
			}
			have += take
			continue
		}
		// The bytes of the messages taken: the extent's own length, or, in the last extent a version
		// takes part of, what is left of the version's length: no need to find message boundaries.
		need := e.RawBytes
		if take < e.Count {
			need = rawBytes - 1 - int64(len(out))
		}
		if len(e.Segment.Values) > 0 {
			// Only the first messages of the segment: only their values are fetched.
			var err error
			if out, err = appendRawPrefix(ctx, st, l.Key, e.Segment, need, out); err != nil {
				return nil, err
			}
			have += take
			continue
		}
		var err error
		if out, err = appendSegmentPrefix(ctx, st, l.Key, e, take, need, out, cache); err != nil {
			return nil, err
		}
		have += take
	}
	if have != n {
		return nil, fmt.Errorf("%w: generation %d holds %d messages, wanted %d", ErrCorrupt, l.Gen, have, n)
	}
	return append(out, ']'), nil
}

// appendSegmentPrefix appends to out the first need raw bytes of e's segment, the bytes of its first
// take messages, from its decoded raw bytes (cached), checking that they end a message.
func appendSegmentPrefix(ctx context.Context, st Store, key Key, e Extent, take int, need int64, out []byte, cache SegmentCache) ([]byte, error) {
	raw, err := readSegment(ctx, st, key, e.Segment, cache)
	if err != nil {
		return nil, err
	}
	if need < 0 || need > int64(len(raw)) || need < int64(len(raw)) && raw[need] != ',' {
		return nil, fmt.Errorf("%w: segment %s: the first %d of its messages are not %d bytes", ErrCorrupt, e.Segment.ID, take, need)
	}
	return append(out, raw[:need]...), nil // messages are contiguous, one comma apart
}

// readSegment returns a segment's raw bytes, decoded no further than its reference allows.
func readSegment(ctx context.Context, st Store, key Key, ref SegmentRef, cache SegmentCache) ([]byte, error) {
	load := func() ([]byte, error) { return appendRaw(ctx, st, key, ref, nil) }
	if cache == nil {
		return load()
	}
	// quoted: a namespace may hold "/", and two namespaces must never name one cache entry
	return cache.GetOrLoad(strconv.Quote(key.Namespace)+"/"+ref.ID, load)
}

// appendRaw appends the raw bytes of a segment of messages to out: its blob, with its values put
// back where they were.
func appendRaw(ctx context.Context, st Store, key Key, ref SegmentRef, out []byte) ([]byte, error) {
	if len(ref.Values) == 0 {
		return appendBlob(ctx, st, key, ref, out)
	}
	return appendRawPrefix(ctx, st, key, ref, ref.RawBytes, out)
}

// readStripped returns a segment's blob bytes: its raw bytes without its values.
func readStripped(ctx context.Context, st Store, key Key, ref SegmentRef) ([]byte, error) {
	blob := ref
	blob.RawBytes -= valueBytes(ref.Values)
	return appendBlob(ctx, st, key, blob, nil)
}

// appendRawPrefix appends the first n raw bytes of a segment of messages to out, n being its
// length or the length of its first messages, and fetches only the values among them.
func appendRawPrefix(ctx context.Context, st Store, key Key, ref SegmentRef, n int64, out []byte) ([]byte, error) {
	if out == nil {
		out = make([]byte, 0, max(n, 0))
	}
	start := len(out)
	err := spliceValues(ctx, st, key, ref, n, func(p []byte) { out = append(out, p...) }, func(v ValueRef) error {
		var err error
		out, err = appendValue(ctx, st, key.Namespace, v, out)
		return err
	})
	if err != nil {
		return nil, err
	}
	if got := int64(len(out) - start); got != n {
		return nil, fmt.Errorf("%w: segment %s: its first %d bytes read back as %d", ErrCorrupt, ref.ID, n, got)
	}
	return out, nil
}

// spliceValues walks the first n raw bytes of a segment with values, n being its length or the
// length of its first messages: plain is given the bytes of its blob between its values, value each
// value among them, in order. Only the segment's blob is fetched here; value fetches its values.
func spliceValues(ctx context.Context, st Store, key Key, ref SegmentRef, n int64, plain func([]byte), value func(ValueRef) error) error {
	if n < 0 || n > ref.RawBytes {
		return fmt.Errorf("%w: segment %s: wanted its first %d bytes, it has %d", ErrCorrupt, ref.ID, n, ref.RawBytes)
	}
	stripped, err := readStripped(ctx, st, key, ref)
	if err != nil {
		return err
	}
	at, cut := int64(0), int64(0)
	for _, v := range ref.Values {
		if v.At >= n {
			break // in a message after the prefix
		}
		end := v.At - cut // where the value was, in the stripped bytes
		if end < at || end > int64(len(stripped)) || v.At+v.RawBytes > n {
			return fmt.Errorf("%w: segment %s: value %s is out of place", ErrCorrupt, ref.ID, v.ID)
		}
		plain(stripped[at:end])
		if err := value(v); err != nil {
			return err
		}
		at, cut = end, cut+v.RawBytes
	}
	rest := n - cut // stripped bytes up to the end of the prefix
	if rest < at || rest > int64(len(stripped)) || rest < int64(len(stripped)) && stripped[rest] != ',' {
		return fmt.Errorf("%w: segment %s: its first %d bytes do not end a message", ErrCorrupt, ref.ID, n)
	}
	plain(stripped[at:rest])
	return nil
}

// appendBlob decodes the blob of a segment, ref.RawBytes long, onto out: a small blob whole, a
// large one a piece at a time.
func appendBlob(ctx context.Context, st Store, key Key, ref SegmentRef, out []byte) ([]byte, error) {
	if ref.RawBytes < StreamBytes {
		blob, err := st.GetSegment(ctx, key, ref)
		if err != nil {
			return nil, err
		}
		raw, err := codec.DecodeBlob(blob, ref.RawBytes)
		if err != nil || out == nil {
			return raw, err
		}
		return append(out, raw...), nil
	}
	return streamInto(ctx, st, key, ref, out)
}

// streamInto decodes the blob of a segment onto out as its pieces are read: no copy of the blob or
// of what it decodes to is made.
func streamInto(ctx context.Context, st Store, key Key, ref SegmentRef, out []byte) ([]byte, error) {
	r := &errReader{r: st.OpenSegment(ctx, key, ref)}
	start := len(out)
	out, err := codec.AppendBlob(out, r, ref.RawBytes)
	if r.err != nil {
		return nil, r.err // storage (a segment compacted away: ErrNotFound), not decoding
	}
	if err != nil {
		return nil, fmt.Errorf("%w: segment %s: %v", ErrCorrupt, ref.ID, err)
	}
	if got := int64(len(out) - start); got != ref.RawBytes {
		return nil, fmt.Errorf("%w: segment %s decodes to %d bytes, its reference says %d", ErrCorrupt, ref.ID, got, ref.RawBytes)
	}
	return out, nil
}

// errReader keeps the first error of the reader it wraps other than io.EOF.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// Verify checks raw against the hash and size v recorded.
func Verify(v Version, raw []byte) error {
	want := Hash(raw)
	if int64(len(raw)) != v.RawBytes || want != v.Hash {
		return fmt.Errorf("version %d of %s: %w (have %s, %d bytes; recorded %s, %d bytes)",
			v.Version, v.Key, ErrCorrupt, want, len(raw), v.Hash, v.RawBytes)
	}
	return nil
}
