package snapshot

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"fmt"
	"hash"
)

// How a session's conversation is stored.
//
// Messages are stored in segments: a segment's raw bytes are canonical messages joined by ",". A
// generation's layout is a list of extents, each "the first Count messages of a segment"; the log
// of the generation is their concatenation. A version in that generation is the first
// Counts.Messages messages of the log. Appending messages writes one small segment and adds an
// extent; compaction later merges extents into larger segments, changing only the layout, never a
// version. A save that rewrites history (a changed or removed message) starts a new generation
// whose layout reuses the unchanged prefix; the old layout is kept for the old versions.

// SegmentRef names a stored segment.
type SegmentRef struct {
	ID          string `json:"id"` // random, fresh for every segment written
	Chunks      int    `json:"chunks"`
	Messages    int    `json:"messages"`
	RawBytes    int64  `json:"rawBytes"` // with its values
	StoredBytes int64  `json:"storedBytes"`
	// Values are the large strings cut out of the segment and stored once per namespace
	// (values.go); its blob holds the rest.
	Values []ValueRef `json:"values,omitempty"`
}

// Extent is the first Count messages of a segment; RawBytes is their length, commas included.
type Extent struct {
	Segment  SegmentRef `json:"segment"`
	Count    int        `json:"count"`
	RawBytes int64      `json:"rawBytes"`
}

// Whole reports whether the extent is its whole segment.
func (e Extent) Whole() bool { return e.Count == e.Segment.Messages }

// Layout is where one generation's messages are.
type Layout struct {
	Key     Key      `json:"key"`
	Gen     uint64   `json:"gen"`
	Extents []Extent `json:"extents"`
}

// Messages is the number of messages the layout holds.
func (l Layout) Messages() int {
	n := 0
	for _, e := range l.Extents {
		n += e.Count
	}
	return n
}

// Head is what a session's head record holds: the head version, the layout of its generation,
// and the SHA-256 state of its canonical bytes without the closing "]" — so appending hashes only
// the new bytes, and a client that resends its whole array is recognised by hashing its prefix.
type Head struct {
	Version
	State    []byte    `json:"state"`
	Layout   Layout    `json:"layout"`
	OldGens  []uint64  `json:"oldGens,omitempty"`  // generations whose layouts older versions use
	Archives []Archive `json:"archives,omitempty"` // older version records, batched and compressed
	// FirstVersion is the oldest version retention kept (0 or 1: none was pruned).
	FirstVersion uint64 `json:"firstVersion,omitempty"`
	// Lease is who may write the session (lease.go); nil until a lease is first acquired.
	Lease *Lease `json:"lease,omitempty"`
	// Moved is set once the session was migrated away: it refuses writes.
	Moved *Moved `json:"moved,omitempty"`
	// Recent names the save ids of the versions before this one, newest last (recent.go): a save
	// delivered again after later versions were committed is recognised by what the commit itself
	// recorded.
	Recent []string `json:"recent,omitempty"`
}

// Exists reports whether the session has a version; a head may hold only a lease.
func (h Head) Exists() bool { return h.Version.Version > 0 }

// first is the oldest version the session still has.
func (h Head) first() uint64 { return max(h.FirstVersion, 1) }

// hashState is a resumable SHA-256 of a conversation's canonical bytes minus the final "]".
type hashState struct{ h hash.Hash }

func newHashState() hashState { return hashState{sha256.New()} }

func resumeHashState(state []byte) (hashState, error) {
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return hashState{}, fmt.Errorf("%w: head hash state: %v", ErrCorrupt, err)
	}
	return hashState{h}, nil
}

func (s hashState) write(b []byte) { s.h.Write(b) }

func (s hashState) marshal() []byte {
	b, _ := s.h.(encoding.BinaryMarshaler).MarshalBinary()
	return b
}

// prefixSum is the digest of what was written so far (the canonical bytes without "]").
func (s hashState) prefixSum() []byte { return s.h.Sum(nil) }

// hash is the "sha256:<hex>" of what was written plus the closing "]".
func (s hashState) hash() string {
	c, _ := resumeHashState(s.marshal())
	c.write([]byte{']'})
	return "sha256:" + hex.EncodeToString(c.h.Sum(nil))
}

// prefixExtents returns the extents holding the first len(kept) messages of l, the last one
// shortened if it must be; kept are those messages (a save's, found equal to them), which give the
// length of a shortened extent without reading its segment.
func prefixExtents(l Layout, kept [][]byte) ([]Extent, error) {
	var out []Extent
	for _, e := range l.Extents {
		if len(kept) == 0 {
			break
		}
		if e.Count <= len(kept) {
			out = append(out, e)
			kept = kept[e.Count:]
			continue
		}
		out = append(out, Extent{Segment: e.Segment, Count: len(kept), RawBytes: joinedLen(kept)})
		kept = nil
	}
	if len(kept) > 0 {
		return nil, fmt.Errorf("%w: layout of generation %d holds fewer messages than asked", ErrCorrupt, l.Gen)
	}
	return out, nil
}

func joinedLen(msgs [][]byte) int64 {
	n := int64(max(len(msgs)-1, 0))
	for _, m := range msgs {
		n += int64(len(m))
	}
	return n
}

func join(msgs [][]byte) []byte {
	out := make([]byte, 0, joinedLen(msgs))
	for i, m := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return out
}
