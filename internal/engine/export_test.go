package engine

import (
	"context"
	"slices"

	"github.com/klauspost/compress/zstd"
)

// CrashBeforeDeletes makes e's packs stop after their commit, as a crash would (tests).
func CrashBeforeDeletes(e *Engine, crash bool) { e.crashBeforeDeletes = crash }

// CutFrame is cutFrame (readzstd.go), for its tests.
func CutFrame(f []byte, raw int64) (out, plain []byte, ok bool, err error) { return cutFrame(f, raw) }

// CompressFrame is a pack's compression (stream.go).
func CompressFrame(b []byte) []byte { return compressPack(b) }

// SetMaxRun lowers how much a run of saves sharing a frame decodes to (save.go maxRun).
func SetMaxRun(e *Engine, n int64) { e.maxRun = n }

// SavePiece decodes a stored entry and returns, for a save, whether its data starts a frame and
// how many bytes it decodes to.
func SavePiece(b []byte) (save, frame bool, raw int64, err error) {
	m, _, err := decodeEntry(b)
	if err != nil || m.Kind != kindSave {
		return false, false, 0, err
	}
	return true, m.Piece.Frame, m.Piece.RawBytes, nil
}

// WithoutBack returns entry b as it was written before back pointers (docs/format.md §8.3.1):
// the same fields, no flag bit 7 and no back field.
func WithoutBack(b []byte) ([]byte, error) {
	m, data, err := decodeEntry(b)
	if err != nil {
		return nil, err
	}
	m.Back, m.HasBack = 0, false
	return encodeEntry(m, data)
}

// WithBack returns entry b with its back pointer set to back (b must have one).
func WithBack(b []byte, back uint64) ([]byte, error) {
	m, data, err := decodeEntry(b)
	if err != nil {
		return nil, err
	}
	m.Back = back
	return encodeEntry(m, data)
}

// BackOf returns entry b's back pointer, and whether it has one.
func BackOf(b []byte) (uint64, bool, error) {
	m, _, err := decodeEntry(b)
	return m.Back, m.HasBack, err
}

// AlwaysBack makes every walk that takes at most 64 records go by back pointer, however short the
// tail (back.go), until the test ends.
func AlwaysBack(t interface{ Cleanup(func()) }) {
	old := backRangeFactor
	backRangeFactor = 0
	t.Cleanup(func() { backRangeFactor = old })
}

// PackOf says whether entry b is a pack, and names the pack before it (its Head.Pack).
func PackOf(b []byte) (isPack bool, prev uint64, err error) {
	m, _, err := decodeEntry(b)
	return m.Kind == kindPack, m.Head.Pack, err
}

// WithPackBefore returns entry b naming prev as the pack before it (its Head.Pack).
func WithPackBefore(b []byte, prev uint64) ([]byte, error) {
	m, data, err := decodeEntry(b)
	if err != nil {
		return nil, err
	}
	m.Head.Pack = prev
	return encodeEntry(m, data)
}

// PlanLargeStrings plans save req as Save does (the session loaded first) without committing it,
// and returns the new bytes the save would store (values included), where the plan says their
// strings of ValueMinBytes or more are, and where storeValues would cut values out of them.
func PlanLargeStrings(ctx context.Context, e *Engine, req SaveRequest) (raw []byte, large, values [][2]int, err error) {
	s := e.session(req.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := e.load(ctx, s); err != nil {
		return nil, nil, nil, err
	}
	p, err := e.plan(ctx, s, req)
	if err != nil {
		return nil, nil, nil, err
	}
	raw = p.newBytes()
	large = p.largeStrings(raw)
	return raw, large, valueSpans(raw, slices.Clone(large)), nil
}

// SaveFrames decodes a stored entry and returns, for a save, how many zstd frames its data starts
// (read from the frame and block headers; the last one is left open).
func SaveFrames(b []byte) (int, error) {
	m, data, err := decodeEntry(b)
	if err != nil || m.Kind != kindSave || !m.Piece.Frame {
		return 0, err // a piece that does not start a frame continues one
	}
	frames := 0
	for at := 0; at < len(data); {
		var h zstd.Header
		if err := h.Decode(data[at:]); err != nil {
			return frames, err
		}
		frames++
		at += h.HeaderSize
		for at+3 <= len(data) {
			bh := int(data[at]) | int(data[at+1])<<8 | int(data[at+2])<<16
			size := bh >> 3
			if (bh>>1)&3 == 1 {
				size = 1
			}
			at += 3 + size
			if bh&1 == 1 {
				break // the frame's last block: another frame follows, if anything
			}
		}
	}
	return frames, nil
}

// SaveIDLookupHolds reads key's tail as the save-id lookup does (tailRecords' read) and returns
// how many records it found and the bytes of entry data the read kept.
func SaveIDLookupHolds(ctx context.Context, e *Engine, key Key) (records int, data int, err error) {
	last, err := e.last(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	entries, err := e.entriesFor(ctx, key, max(lastPackOf(last), sinceOf(last)), last.seq, false)
	if err != nil {
		return 0, 0, err
	}
	for _, x := range entries {
		data += len(x.data)
	}
	recs, _, _, err := e.tailRecords(ctx, key, last)
	return len(recs), data, err
}

// EntryData decodes a stored entry and returns its data (what follows its meta), whether it is a
// pack, and, for a pack, whether it is open.
func EntryData(b []byte) (data []byte, isPack, open bool, err error) {
	m, data, err := decodeEntry(b)
	return data, m.Kind == kindPack, m.Open, err
}

// PackRun decodes a stored entry and returns, for a pack, whether its data starts a frame (else a
// reader joins it to the run before it) and how many bytes its pieces decode to.
func PackRun(b []byte) (isPack, starts bool, raw int64, err error) {
	m, _, err := decodeEntry(b)
	if err != nil || m.Kind != kindPack {
		return false, false, 0, err
	}
	for _, p := range m.Packed {
		raw += p.Piece.RawBytes
	}
	return true, startsFrame(m.Packed), raw, nil
}
