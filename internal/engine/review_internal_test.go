package engine

import (
	"fmt"
	"testing"
)

// Finding 7 (stream.go logBuilder.flush, decodeRuns): the sizes of a run's pieces are summed in an
// int64 without a bound. decodeEntry accepts each piece's raw bytes up to maxSize (2^62), so a
// corrupt (or hostile) pack whose four versions claim 2^62 bytes each sums to 2^64 = 0: it matches
// an empty frame's 0 decoded bytes, and checkPieces then slices plain[:2^62] — a panic in the
// daemon instead of ErrCorrupt. (The same holds for a run of save entries.) The test goes through
// decodeEntry, so the entry is one the engine's reader accepts.
//
// Fixed: decodeEntry refuses a piece of more than maxDecoded bytes, and a run claiming more than
// maxDecoded in all is refused before it is decoded; pieces of maxDecoded each go through the
// reader as the test's lower bound.
func TestReview_PieceSizesOverflowPanics(t *testing.T) {
	for _, size := range []int64{maxSize, maxDecoded} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { pieceSizes(t, size) })
	}
}

func pieceSizes(t *testing.T, size int64) {
	state, err := extendHash(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := finish(state)
	if err != nil {
		t.Fatal(err)
	}
	var packed []packedVersion
	for v := uint64(1); v <= 4; v++ {
		packed = append(packed, packedVersion{Record: Record{Version: v, Hash: hash, RawBytes: 2},
			Piece: pieceInfo{RawBytes: size, Frame: v == 1}})
	}
	h := emptyHead()
	h.Version, h.State = 4, state
	b, err := encodeEntry(entryMeta{Kind: kindPack, Head: h, Packed: packed}, compressFrame(nil))
	if err != nil {
		t.Fatal(err)
	}
	m, data, err := decodeEntry(b)
	if err != nil {
		if size > maxDecoded {
			return // refused by the reader: fine
		}
		t.Fatalf("the reader refuses pieces of %d bytes: %v", size, err)
	}
	for _, upTo := range []int{4, 2} { // the whole pack, and a version inside it (partial)
		t.Run(fmt.Sprint(upTo), func(t *testing.T) {
			err := func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("panic: %v", r)
					}
				}()
				lb := logBuilder{out: []byte{'['}, partial: upTo < 4}
				if err := lb.addPack(m.Packed[:upTo], data, false); err != nil {
					return nil
				}
				_, err = lb.result()
				if err == nil {
					return fmt.Errorf("a pack claiming 2^64 bytes read as a log")
				}
				return nil
			}()
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
