package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// Large values are stored once per namespace.
//
// A large JSON string of a message (an inline image, a multi-MiB tool output; see ValueMinBytes)
// is cut out of its segment and stored apart, named by the SHA-256 of its bytes: the same image in
// twenty sessions of a namespace, or twice in one conversation, is stored once. The segment keeps
// a ValueRef where the string was; reading puts the bytes back, so the raw bytes of a segment, and
// every version's hash, are what they were.
//
// A value's entry (ValueEntry) says where its blob is and when a save last used it. Values are
// collected by mark and sweep (SweepValues): a value no head or kept layout of its namespace
// refers to and that no save used for SweepGrace is deleted. A save that uses a value makes sure
// the entry's Used is recent (touching it with a compare-and-swap when it is not) and commits
// within SweepGrace/2 of that, so the sweep never takes a value a save is about to refer to; the
// sweep marks an entry Deleting with a compare-and-swap before deleting, so a save that touched it
// meanwhile wins, and a save that finds an entry Deleting stores the value again under a new name.

// Which JSON strings (lengths with quotes) are stored as values: opaque data, such as the base64 of
// an inline image, from ValueMinBytes on; any string from TextValueMinBytes on. Text compresses far
// better with the rest of its conversation than alone (on the corpus, 9 tool outputs of ~50 KB take
// 122 KB compressed alone, a fraction of that in their segment), so it stays there unless it is huge.
const (
	ValueMinBytes     = 32 << 10
	TextValueMinBytes = 1 << 20
)

// valueStreamBytes is the size from which a value is compressed into the store piece by piece, as
// large segments are: many images of a large save would otherwise each leave a compressed copy
// behind for the collector.
const valueStreamBytes = 256 << 10

// valueSpans returns where the strings of raw that are stored as values are.
func valueSpans(raw []byte) [][2]int {
	spans := codec.LargeStrings(raw, ValueMinBytes)
	out := spans[:0]
	for _, sp := range spans {
		if sp[1]-sp[0] >= TextValueMinBytes || opaque(raw[sp[0]+1:sp[1]-1]) {
			out = append(out, sp)
		}
	}
	return out
}

// opaque reports whether s is base64 data, allowing a short prefix such as "data:image/png;base64,".
func opaque(s []byte) bool {
	other := 0
	for _, c := range s {
		if !base64Byte[c] {
			if other++; other > 64 {
				return false
			}
		}
	}
	return true
}

var base64Byte = func() (t [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_") {
		t[c] = true
	}
	return t
}()

// ValueRef is a value cut out of a segment: At is where its bytes were in the segment's raw bytes.
type ValueRef struct {
	ID          string `json:"id"`   // hex SHA-256 of the value's bytes, quotes included
	Name        string `json:"name"` // the segment id its blob is stored under
	At          int64  `json:"at"`
	RawBytes    int64  `json:"rawBytes"`
	Chunks      int    `json:"chunks"`
	StoredBytes int64  `json:"storedBytes"`
}

// ValueEntry is a stored value of a namespace.
type ValueEntry struct {
	Namespace   string    `json:"namespace"`
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	RawBytes    int64     `json:"rawBytes"`
	Chunks      int       `json:"chunks"`
	StoredBytes int64     `json:"storedBytes"`
	Used        time.Time `json:"used"`               // when a save last referred to it
	Deleting    bool      `json:"deleting,omitempty"` // the sweep is deleting it: never refer to it again
}

// ValuesKey is where the blobs of a namespace's values are stored, as segments: a key whose
// session and agent are the byte 0xFF, which is not UTF-8, so no session can have it.
func ValuesKey(namespace string) Key {
	return Key{Namespace: namespace, Session: "\xff", Agent: "\xff"}
}

func (v ValueRef) segment() SegmentRef {
	return SegmentRef{ID: v.Name, Chunks: v.Chunks, RawBytes: v.RawBytes, StoredBytes: v.StoredBytes}
}

// valueBytes is how many bytes of a segment's raw bytes its values hold.
func valueBytes(vals []ValueRef) int64 {
	var n int64
	for _, v := range vals {
		n += v.RawBytes
	}
	return n
}

// storedValues is what storing a segment's values did.
type storedValues struct {
	refs  []ValueRef
	added int64     // stored bytes of the blobs written (values already stored cost nothing)
	until time.Time // the values are safe from the sweep until then: commit before
}

// valueID names a value: the hex SHA-256 of its raw bytes (the JSON string, quotes included).
func valueID(val []byte) string {
	sum := sha256.Sum256(val)
	return hex.EncodeToString(sum[:])
}

// storeValues makes sure the values at spans of raw are stored in the namespace and safe from the
// sweep, storing those that are not.
func storeValues(ctx context.Context, st Store, ns string, raw []byte, spans [][2]int) (storedValues, error) {
	out := storedValues{refs: make([]ValueRef, 0, len(spans))}
	seen := map[string]ValueEntry{}
	for _, sp := range spans {
		val := raw[sp[0]:sp[1]]
		id := valueID(val)
		e, ok := seen[id]
		if !ok {
			var until time.Time
			var added int64
			var err error
			if e, until, added, err = useValue(ctx, st, ns, id, val); err != nil {
				return storedValues{}, err
			}
			seen[id] = e
			out.added += added
			if out.until.IsZero() || until.Before(out.until) {
				out.until = until
			}
		}
		out.refs = append(out.refs, ValueRef{ID: id, Name: e.Name, At: int64(sp[0]), RawBytes: e.RawBytes, Chunks: e.Chunks, StoredBytes: e.StoredBytes})
	}
	return out, nil
}

// maxValueAttempts bounds the compare-and-swap retries on one value's entry.
const maxValueAttempts = 16

// useValue returns the entry of value id, storing val first if the namespace does not have it, and
// the time until which the sweep leaves it alone.
func useValue(ctx context.Context, st Store, ns, id string, val []byte) (ValueEntry, time.Time, int64, error) {
	for attempt := 0; attempt < maxValueAttempts; attempt++ {
		now := time.Now()
		e, rev, err := st.ValueEntry(ctx, ns, id)
		if errors.Is(err, ErrNotFound) {
			rev = 0
		} else if err != nil {
			return ValueEntry{}, time.Time{}, 0, err
		}
		if rev != 0 && !e.Deleting {
			if e.RawBytes != int64(len(val)) {
				return ValueEntry{}, time.Time{}, 0, fmt.Errorf("%w: value %s of namespace %q is %d bytes, its content is %d", ErrCorrupt, id, ns, e.RawBytes, len(val))
			}
			if age := now.Sub(e.Used); age < SweepGrace/4 {
				// Recently used: safe without a write. The deadline is on this process's monotonic
				// clock; Used is another daemon's wall clock (see ClockSkew).
				return e, now.Add(SweepGrace/2 - max(age, 0)), 0, nil
			}
			e.Used = now
			if _, err := st.SwapValueEntry(ctx, e, rev); errors.Is(err, ErrRevisionMismatch) {
				continue
			} else if err != nil {
				return ValueEntry{}, time.Time{}, 0, err
			}
			return e, now.Add(SweepGrace / 2), 0, nil
		}
		// Not stored, or being deleted: store it under a new name and claim the entry.
		var ref SegmentRef
		if len(val) >= valueStreamBytes {
			ref, err = streamBlob(ctx, st, ValuesKey(ns), newSegmentID(), bytes.NewReader(val), int64(len(val)))
		} else {
			ref, err = putBlob(ctx, st, ValuesKey(ns), newSegmentID(), val)
		}
		if err != nil {
			return ValueEntry{}, time.Time{}, 0, err
		}
		ne := ValueEntry{Namespace: ns, ID: id, Name: ref.ID, RawBytes: int64(len(val)), Chunks: ref.Chunks, StoredBytes: ref.StoredBytes, Used: now}
		if _, err := st.SwapValueEntry(ctx, ne, rev); errors.Is(err, ErrRevisionMismatch) {
			_ = st.DeleteSegment(ctx, ValuesKey(ns), ref)
			continue // another save stored it first: use theirs
		} else if err != nil {
			// The entry may have been written all the same (a lost reply): keep the blob it
			// would name. If no entry names it, the sweep removes it as an orphan.
			return ValueEntry{}, time.Time{}, 0, err
		}
		return ne, now.Add(SweepGrace / 2), ref.StoredBytes, nil
	}
	return ValueEntry{}, time.Time{}, 0, fmt.Errorf("%w: value %s of namespace %q kept changing", ErrBusy, id, ns)
}

// putMessages stores raw, canonical messages joined by commas, as a new segment, its large strings
// as values; until is when the commit must have happened by (zero: no values).
func putMessages(ctx context.Context, st Store, key Key, raw []byte, messages int) (ref SegmentRef, added int64, until time.Time, err error) {
	spans := valueSpans(raw)
	if len(spans) == 0 {
		ref, added, err = putSegment(ctx, st, key, raw, messages)
		return ref, added, time.Time{}, err
	}
	vals, err := storeValues(ctx, st, key.Namespace, raw, spans)
	if err != nil {
		return SegmentRef{}, 0, time.Time{}, err
	}
	stripped := make([]io.Reader, 0, len(spans)+1)
	at := 0
	for _, sp := range spans {
		stripped = append(stripped, bytes.NewReader(raw[at:sp[0]]))
		at = sp[1]
	}
	stripped = append(stripped, bytes.NewReader(raw[at:]))
	size := int64(len(raw)) - valueBytes(vals.refs)
	ref, err = putBlobFrom(ctx, st, key, newSegmentID(), io.MultiReader(stripped...), size)
	if err != nil {
		return SegmentRef{}, 0, time.Time{}, err
	}
	ref.Messages, ref.RawBytes, ref.Values = messages, int64(len(raw)), vals.refs
	return ref, ref.StoredBytes + vals.added, vals.until, nil
}

// appendValue appends a value's bytes to out, checking them against its id.
func appendValue(ctx context.Context, st Store, ns string, v ValueRef, out []byte) ([]byte, error) {
	start := len(out)
	out, err := streamInto(ctx, st, ValuesKey(ns), v.segment(), out)
	if errors.Is(err, ErrNotFound) {
		// Values are never replaced (compaction keeps them), so reading again cannot help.
		return nil, fmt.Errorf("%w: value %s of namespace %q (blob %s) is missing: %v", ErrCorrupt, v.ID, ns, v.Name, err)
	}
	if err != nil {
		return nil, err
	}
	if valueID(out[start:]) != v.ID {
		return nil, fmt.Errorf("%w: value %s of namespace %q reads back with another hash", ErrCorrupt, v.ID, ns)
	}
	return out, nil
}
