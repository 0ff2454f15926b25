package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// MaxExtents is how many extents a head's layout may have before a background compaction is due.
const MaxExtents = 8

// HardMaxExtents bounds how many segments a restore reads, however many versions a session has
// and however busy it is: a save that would pass it merges the tail itself (background merges can
// keep losing their swap to the saves of a busy session).
const HardMaxExtents = 2 * MaxExtents

// merged is what mergeRun did.
type merged struct {
	extents []Extent   // the layout's new extents
	run     []Extent   // the extents merged away
	ref     SegmentRef // the new segment
	wrote   int64      // its stored bytes (with those of any value stored anew)
	until   time.Time  // commit before then (see commit.until)
}

// mergeRun merges ext[from:] into one new segment. The extents' blobs are joined as they are and
// their values carried over by reference, shifted to where they now are: a merge reads and writes
// no image. Segments holding strings that are values now but were not when they were written are
// merged through their raw bytes instead, which cuts those strings out.
func mergeRun(ctx context.Context, st Store, key Key, ext []Extent, from int) (merged, error) {
	run := ext[from:]
	parts := make([]io.Reader, 0, 2*len(run))
	var vals []ValueRef
	var rawBytes, size int64
	count := 0
	for i, e := range run {
		stripped, evals, err := extentBlob(ctx, st, key, e)
		if err != nil {
			return merged{}, err
		}
		if len(valueSpans(stripped)) > 0 {
			return mergeRaw(ctx, st, key, ext, from)
		}
		if i > 0 {
			parts = append(parts, bytes.NewReader([]byte{','}))
			rawBytes, size = rawBytes+1, size+1
		}
		for _, v := range evals {
			v.At += rawBytes
			vals = append(vals, v)
		}
		parts = append(parts, bytes.NewReader(stripped))
		rawBytes, size, count = rawBytes+e.RawBytes, size+int64(len(stripped)), count+e.Count
	}
	ref, err := putBlobFrom(ctx, st, key, newSegmentID(), io.MultiReader(parts...), size)
	if err != nil {
		return merged{}, err
	}
	ref.Messages, ref.RawBytes, ref.Values = count, rawBytes, vals
	// The values were the head's all along: no deadline to commit by (see commit.until).
	out := append(append([]Extent(nil), ext[:from]...), Extent{Segment: ref, Count: count, RawBytes: rawBytes})
	return merged{extents: out, run: run, ref: ref, wrote: ref.StoredBytes}, nil
}

// extentBlob returns the blob bytes of an extent's messages (its raw bytes without its values) and
// the values among them.
func extentBlob(ctx context.Context, st Store, key Key, e Extent) ([]byte, []ValueRef, error) {
	stripped, err := readStripped(ctx, st, key, e.Segment)
	if err != nil {
		return nil, nil, err
	}
	n := e.RawBytes // its length in the blob: less the values before its end
	var vals []ValueRef
	for _, v := range e.Segment.Values {
		if v.At >= e.RawBytes {
			break
		}
		if v.At+v.RawBytes > e.RawBytes {
			return nil, nil, fmt.Errorf("%w: segment %s: value %s is out of place", ErrCorrupt, e.Segment.ID, v.ID)
		}
		vals = append(vals, v)
		n -= v.RawBytes
	}
	if n < 0 || n > int64(len(stripped)) || n < int64(len(stripped)) && stripped[n] != ',' {
		return nil, nil, fmt.Errorf("%w: segment %s: its first %d messages do not end at byte %d of its blob", ErrCorrupt, e.Segment.ID, e.Count, n)
	}
	return stripped[:n], vals, nil
}

// mergeRaw merges ext[from:] through their raw bytes, values put back and cut out again.
func mergeRaw(ctx context.Context, st Store, key Key, ext []Extent, from int) (merged, error) {
	run := ext[from:]
	var msgs [][]byte
	for _, e := range run {
		raw, err := readSegment(ctx, st, key, e.Segment, nil)
		if err != nil {
			return merged{}, err
		}
		all := codec.SplitCanonical(raw)
		if len(all) != e.Segment.Messages {
			return merged{}, fmt.Errorf("%w: segment %s holds %d messages, its reference says %d", ErrCorrupt, e.Segment.ID, len(all), e.Segment.Messages)
		}
		msgs = append(msgs, all[:e.Count]...)
	}
	ref, wrote, until, err := putMessages(ctx, st, key, join(msgs), len(msgs))
	if err != nil {
		return merged{}, err
	}
	out := append(append([]Extent(nil), ext[:from]...), Extent{Segment: ref, Count: len(msgs), RawBytes: ref.RawBytes})
	return merged{extents: out, run: run, ref: ref, wrote: wrote, until: until}, nil
}

// deleteUnreferenced deletes the segments of merged that no layout of h's session refers to any
// more; it runs after the swap that stopped referring to them.
func deleteUnreferenced(ctx context.Context, st Store, h Head, merged []Extent) (int, int64, error) {
	inUse, err := referenced(ctx, st, h)
	if err != nil {
		return 0, 0, err
	}
	deleted, freed := 0, int64(0)
	for _, e := range merged {
		if inUse[e.Segment.ID] {
			continue
		}
		if err := st.DeleteSegment(ctx, h.Key, e.Segment); err != nil && !errors.Is(err, ErrNotFound) {
			return deleted, freed, err
		}
		inUse[e.Segment.ID] = true // a segment may appear twice in a run; delete it once
		deleted++
		freed += e.Segment.StoredBytes
	}
	return deleted, freed, nil
}

// mergeFrom picks where the merged tail run starts: walking back from the end, take extents while
// the next one back is no more than twice what is taken so far. At least the last two are merged.
func mergeFrom(ext []Extent) int {
	i := len(ext) - 2
	taken := ext[i].RawBytes + ext[i+1].RawBytes
	for i > 0 && ext[i-1].RawBytes <= 2*taken {
		i--
		taken += ext[i].RawBytes
	}
	return i
}

// referenced returns the segments the head's layout and every kept older layout refer to.
func referenced(ctx context.Context, st Store, h Head) (map[string]bool, error) {
	ids := map[string]bool{}
	for _, e := range h.Layout.Extents {
		ids[e.Segment.ID] = true
	}
	for _, a := range h.Archives {
		ids[a.Segment.ID] = true
	}
	for _, g := range h.OldGens {
		l, err := st.Layout(ctx, h.Key, g)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range l.Extents {
			ids[e.Segment.ID] = true
		}
	}
	return ids, nil
}

// SweepGrace is how old an unreferenced segment must be before Sweep removes it: far longer than
// any save takes between writing its segment and committing it.
const SweepGrace = 10 * time.Minute
