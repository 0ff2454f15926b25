package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Large values are stored once per namespace (docs/format.md §8.12).
//
// A large JSON string of a message (an inline image, a multi-MiB tool output) is cut out of its
// save's piece and stored as a value of the namespace (Log.PutValue), named by the SHA-256 of its
// bytes (quotes included): the same image in twenty sessions of a namespace, or twice in one
// conversation, is stored once. The piece lists where its values were (valueRef); the session's
// zstd stream holds the rest, and readers put the values back, so a version's bytes and hash are
// what was saved. A value whose blob would not fit in one log entry stays in its piece (which is
// then written in parts).
//
// Values no session refers to are swept (SweepValues, sweep.go) through a trash, so that a save
// that made sure of a value just before the sweep took it, and commits after, loses nothing.

// Which JSON strings (lengths with quotes) are stored as values: opaque data, such as the base64 of
// an inline image, from ValueMinBytes on; any string from TextValueMinBytes on. Text compresses far
// better with the rest of its conversation than alone, so it stays there unless it is huge.
const (
	ValueMinBytes     = 32 << 10
	TextValueMinBytes = 1 << 20
)

// valueRef is a value cut out of a piece: At is where its bytes were in the piece's bytes.
type valueRef struct {
	At   int64
	Size int64
	ID   string // hex SHA-256 of the value's bytes, quotes included
}

// valueSpans returns where the strings of raw that are stored as values are, of its strings of
// ValueMinBytes or more (large: what codec.LargeStrings(raw, ValueMinBytes) returns).
func valueSpans(raw []byte, large [][2]int) [][2]int {
	spans := large
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

func valueID(val []byte) string {
	sum := sha256.Sum256(val)
	return hex.EncodeToString(sum[:])
}

// knownValues remembers when this engine last made sure a value was stored (stored it, or found
// it stored), so that a save reusing it soon after writes nothing.
type knownValues struct {
	mu  sync.Mutex
	ids map[string]time.Time // namespace + "/" + id → when
}

const maxKnownValues = 1 << 16

// since returns when value id of ns was last made sure of (zero: not known).
func (k *knownValues) since(ns, id string) time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ids[ns+"/"+id]
}

func (k *knownValues) add(ns, id string, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ids == nil || len(k.ids) >= maxKnownValues {
		k.ids = map[string]time.Time{}
	}
	k.ids[ns+"/"+id] = at
}

// storeValues stores the large values of raw (a piece's bytes) in namespace ns, and returns raw
// without them, where they were, the bytes of the blobs it wrote, and the time by which the save
// must commit (zero: no values): ValueGrace after it last made sure of the oldest of them. large
// is where raw's strings of ValueMinBytes or more are, as the parse of raw found them.
func (e *Engine) storeValues(ctx context.Context, ns string, raw []byte, large [][2]int) ([]byte, []valueRef, int64, time.Time, error) {
	spans := valueSpans(raw, large)
	if len(spans) == 0 {
		return raw, nil, 0, time.Time{}, nil
	}
	var refs []valueRef
	var added int64
	var deadline time.Time
	stripped := make([]byte, 0, len(raw))
	at := 0
	for _, sp := range spans {
		val := raw[sp[0]:sp[1]]
		id := valueID(val)
		sure := e.values.since(ns, id)
		if now := e.cfg.Clock(); sure.IsZero() || now.Sub(sure) > e.cfg.ValueGrace/2 {
			blob := compressFrame(val)
			if len(blob) > e.log.MaxEntry() {
				continue // stays in the piece
			}
			// Stored, or found stored (a value is created once): safe from the sweep for a grace.
			if err := e.log.PutValue(ctx, ns, id, blob); err != nil {
				return nil, nil, 0, time.Time{}, fmt.Errorf("value %s of namespace %q: %w", id, ns, err)
			}
			if sure.IsZero() {
				added += int64(len(blob))
			}
			sure = now
			e.values.add(ns, id, now)
		}
		if by := sure.Add(e.cfg.ValueGrace); deadline.IsZero() || by.Before(deadline) {
			deadline = by
		}
		refs = append(refs, valueRef{At: int64(sp[0]), Size: int64(len(val)), ID: id})
		stripped = append(stripped, raw[at:sp[0]]...)
		at = sp[1]
	}
	return append(stripped, raw[at:]...), refs, added, deadline, nil
}

// value returns value ref of namespace ns, checked against its size and id.
func (e *Engine) value(ctx context.Context, ns string, ref valueRef) ([]byte, error) {
	blob, err := e.log.Value(ctx, ns, ref.ID)
	if errors.Is(err, ErrNotFound) {
		// Swept while a save referring to it was under way: it waits in the trash until the next
		// sweep puts it back.
		_, blob, err = e.trashed(ctx, ns, ref.ID)
	}
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: value %s of namespace %q is missing", ErrCorrupt, ref.ID, ns)
	}
	if err != nil {
		return nil, err
	}
	val, err := decoder.DecodeAll(blob, make([]byte, 0, sizeHint(ref.Size)))
	if err != nil || int64(len(val)) != ref.Size || valueID(val) != ref.ID {
		return nil, fmt.Errorf("%w: value %s of namespace %q does not read back as stored", ErrCorrupt, ref.ID, ns)
	}
	return val, nil
}

// splice appends to out a piece's bytes: plain (its bytes without its values) with its values
// put back where they were.
func splice(out, plain []byte, refs []valueRef, fetch func(valueRef) ([]byte, error)) ([]byte, error) {
	pos, cut := int64(0), int64(0) // in plain; bytes of values before
	for _, v := range refs {
		end := v.At - cut
		if end < pos || end > int64(len(plain)) || v.Size < 2 {
			return nil, fmt.Errorf("%w: value %s is out of place in its piece", ErrCorrupt, v.ID)
		}
		val, err := fetch(v)
		if err != nil {
			return nil, err
		}
		out = append(append(out, plain[pos:end]...), val...)
		pos, cut = end, cut+v.Size
	}
	return append(out, plain[pos:]...), nil
}
