package codec

import (
	"slices"
	"sync"
)

// A tape records, as the scan of a compact payload goes (validCompactTaped), where each of its
// containers and long strings ends, so that the walk after it (the dialect's checks: members,
// elements) jumps over them instead of reading them again. Without it, each byte of a message's long
// strings is read again once per level the walk goes down (the message's members, its content's
// elements, the part's members), in conversations that have a quote or backslash every dozen bytes.
type tape struct {
	base  int    // cap of the canonical form: a slice b of it starts at offset base-cap(b)
	spans []span // in order of start, which is the order the scan meets values in
	// limit bounds len(spans), so that a tape costs at most half the payload's size in memory
	// however many small containers a hostile payload packs in (spansPerByte). A full tape records
	// nothing more: the walk reads what it does not find on it, as without one.
	limit int
	// hint is where the next look-up starts: the span after the last one found, which is what the
	// walk most often asks for next (the first member of a container just found, the next element).
	hint int
	// large lists, when largeMin > 0, every string of at least largeMin bytes (quotes included;
	// member names too) in order of start, for Conversation.LargeStrings: the scan finds them, so
	// the engine need not read the payload again for the strings it stores as values. A full tape
	// still records them: largeMin is at least tapedString, so there are at most len/64 of them.
	large    []span
	largeMin int
	// members is the checker's buffer of the members of one message's objects (checker.scratch),
	// pooled with the tape: a parse then allocates none (1.5 KiB it zeroed before).
	members object
}

// span is where one value is in the payload: [start, end).
type span struct{ start, end int }

// tapedString is the length from which a string is put on the tape: shorter ones are skipped
// faster than looked up.
const tapedString = 64

// bytesPerSpan is how many bytes of payload each span may take at most: 32 bytes for a 16-byte
// span, half the payload at worst. The corpus needs one per 360 bytes or more.
const bytesPerSpan = 32

// reset empties t for a payload of n bytes whose offsets start at the array of capacity base.
func (t *tape) reset(base, n int) {
	t.base, t.spans, t.hint, t.limit = base, t.spans[:0], 0, n/bytesPerSpan
	t.large = t.large[:0]
}

// addString records the string [start, end) of tapedString bytes or more.
func (t *tape) addString(start, end int) {
	if !t.full() {
		t.spans = append(t.spans, span{start, end})
	}
	t.addName(start, end)
}

// addName records the member name [start, end) of tapedString bytes or more: only on large, the
// walk never asks where a name ends.
func (t *tape) addName(start, end int) {
	if t.largeMin > 0 && end-start >= t.largeMin {
		t.large = append(t.large, span{start, end})
	}
}

// full reports whether t records no more spans.
func (t *tape) full() bool { return len(t.spans) >= t.limit }

// maxPooledSpans bounds the tapes kept for reuse (16 bytes a span): the tape of a rare huge
// payload goes to the garbage collector instead of staying in memory.
const maxPooledSpans = 1 << 16

// scratch returns t's buffer of members, emptied, for a checker: room for 32 members, enough for
// most messages' objects.
func (t *tape) scratch() *object {
	if t.members == nil {
		t.members = make(object, 0, 32)
	}
	t.members = t.members[:0]
	return &t.members
}

// maxPooledMembers bounds the member buffers kept for reuse (48 bytes a member).
const maxPooledMembers = 1 << 10

var tapes = sync.Pool{New: func() any { return new(tape) }}

func getTape() *tape { return tapes.Get().(*tape) }

func putTape(t *tape) {
	if cap(t.spans) > maxPooledSpans || cap(t.large) > maxPooledSpans || cap(t.members) > maxPooledMembers {
		return
	}
	clear(t.members[:cap(t.members)]) // its slices of the payload must not keep the payload alive
	t.spans, t.hint, t.large, t.largeMin, t.members = t.spans[:0], 0, t.large[:0], 0, t.members[:0]
	tapes.Put(t)
}

// skip returns the index just past the value starting at b[i], where b is a slice of the payload
// the tape was taken of (sliced from it without a capacity limit); a nil or empty tape reads the
// value.
func (t *tape) skip(b []byte, i int) int {
	if t != nil && len(t.spans) > 0 && (b[i] == '{' || b[i] == '[' || b[i] == '"') {
		off := t.base - cap(b)
		if k, ok := t.find(off + i); ok {
			if end := t.spans[k].end - off; end > i && end <= len(b) {
				return end
			}
		}
	}
	return skipValue(b, i)
}

// find returns the index of the span that starts at start, if there is one. The walk asks mostly
// for what comes a little after the last span found (the members of a container just found, the next
// element, short values the tape leaves out), so it looks there first, then by binary search.
func (t *tape) find(start int) (int, bool) {
	for k := t.hint; k < len(t.spans) && k < t.hint+4; k++ {
		switch s := t.spans[k].start; {
		case s == start:
			t.hint = k + 1
			return k, true
		case s > start:
			if k > 0 && t.spans[k-1].start < start {
				return 0, false // between two spans: a value the tape leaves out
			}
			k = len(t.spans) // before the hint: search
		}
	}
	k, ok := slices.BinarySearchFunc(t.spans, start, func(s span, start int) int { return s.start - start })
	t.hint = k
	if ok {
		t.hint++
	}
	return k, ok
}
