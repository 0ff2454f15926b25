package engine

import (
	"context"
	"errors"
	"fmt"
)

// Walking a session's versions newest first (history pages, a record by version, a save id
// delivered again) starts at the log's last entry. The records of the entries since the last pack
// come either from one read of all of them (up to PackEntries entries with their data), or, for
// the few newest, by following each entry's back pointer (docs/format.md §8.3.1) from the last
// entry back: the entries the pointers name are fetched in small ranges ending at the next one
// wanted, sized from the spacing of the pointers already followed, so that a page of the newest
// ten costs about one read of a dozen entries, whatever the length of the tail.

// backRangeFactor: the walk by pointer is taken when this many times the records wanted is below
// the number of entries since the last pack (its reads then hold fewer entries than the tail); a
// var so that tests can make every walk that takes few records go by pointer (export_test.go).
// So a page of N records reads about 1.5 N entries (readBefore), or, when N is half the tail or
// more, the tail: at most 2 N entries either way, whatever the page size. maxBackRecords only
// keeps the count of records wanted (pageNeed: a page's limit plus the versions above its
// cursor) a small integer; a reply holds about 2,000 records. maxBackRanges bounds the walk's
// reads (then it reads the tail).
var backRangeFactor = 2

const (
	maxBackRecords = 1 << 16
	maxBackRanges  = 3
)

// byBack reports whether a walk from last that takes at most need records (0: not known) is
// cheaper by back pointers than by reading the tail.
func byBack(last ent, need int) bool {
	return need > 0 && need <= maxBackRecords && need*backRangeFactor < last.meta.Head.TailEntries && last.meta.HasBack
}

// backWalk hands records to a walk's fn newest first, one version after another: a record above
// the one it expects next was handed already (an entry after a pack names the pack, which holds
// that version too) and is passed over; one below it means versions went missing (errShort).
type backWalk struct {
	key   Key
	fn    func(Record, uint64) bool
	first uint64 // the oldest version retention keeps
	next  uint64 // the version expected next (0: any: the walk has not begun)
	done  bool   // fn, or the first version, ended the walk
}

// give offers r, held by the pack at sequence at (0: not in a pack), and says whether the walk
// goes on.
func (w *backWalk) give(r Record, at uint64) (bool, error) {
	switch {
	case w.done:
		return false, nil
	case w.next != 0 && r.Version > w.next:
		return true, nil
	case w.next != 0 && r.Version < w.next:
		return false, fmt.Errorf("session %s: version %d came where version %d was due: %w", w.key, r.Version, w.next, errShort)
	case r.Version < w.first:
		w.done = true
		return false, nil
	}
	r.Key = w.key
	if !w.fn(r, at) || r.Version <= w.first {
		w.done = true
		return false, nil
	}
	w.next = r.Version - 1
	return true, nil
}

// backPointers walks from last by back pointers, giving w each entry's head record, until w is
// done or the walk reaches a pack: it returns the pack's sequence (0: none, the first version was
// given). ok is false if an entry has no back pointer (written before them), or the walk took
// maxBackRanges reads: the caller reads the tail instead (w skips what was given already). need
// is how many records the walk is expected to give.
func (e *Engine) backPointers(ctx context.Context, key Key, last ent, need int, w *backWalk) (pack uint64, ok bool, err error) {
	since := sinceOf(last)
	lo := max(lastPackOf(last), since) // the walk reads no entry at or below it
	x, given := last, 0
	fetched := map[uint64]ent{}
	for reads := 0; ; {
		if x.meta.Kind == kindPack {
			return x.seq, true, nil
		}
		if x.meta.Head.Version > 0 {
			r, err := recordOf(key, x.meta.Head)
			if err != nil {
				return 0, false, fmt.Errorf("session %s entry %d: %w", key, x.seq, err)
			}
			if goOn, err := w.give(r, 0); err != nil || !goOn {
				return 0, true, err
			}
			given++
			for i := len(x.meta.Group) - 1; i >= 0; i-- { // a group entry's earlier versions
				if goOn, err := w.give(x.meta.Group[i].Record, 0); err != nil || !goOn {
					return 0, true, err
				}
				given++
			}
		}
		if !x.meta.HasBack {
			return 0, false, nil
		}
		back := x.meta.Back
		if back == 0 {
			if w.next >= w.first && w.next > 0 {
				return 0, false, fmt.Errorf("session %s entry %d: %w: its back pointer ends the walk above version %d", key, x.seq, ErrCorrupt, w.first)
			}
			return 0, true, nil
		}
		if back >= x.seq || back < since {
			return 0, false, fmt.Errorf("session %s entry %d: %w: back pointer %d outside the live log (%d to %d)", key, x.seq, ErrCorrupt, back, since, x.seq-1)
		}
		if back <= lo { // the last pack: the caller goes on through the packs
			return back, true, nil
		}
		next, ok := fetched[back]
		if !ok {
			if reads == maxBackRanges {
				return 0, false, nil
			}
			reads++
			// Space the read by the pointers followed so far: from the last entry to x, and x's.
			spacing := max((last.seq-x.seq)/uint64(max(given-1, 1)), x.seq-back)
			if err := e.readBefore(ctx, key, lo, back, spacing, max(need-given, 1), fetched); err != nil {
				return 0, false, err
			}
			if next, ok = fetched[back]; !ok { // gone: a pack or a deletion moved the log
				return 0, false, fmt.Errorf("session %s entry %d: %w", key, back, errShort)
			}
		}
		x = next
	}
}

// readBefore reads into fetched the entries up to sequence back from where the left versions
// still wanted should start, spacing sequences apart (plus half again, and two for good measure),
// but none at or below lo (the last pack: the walk gets it by itself if it needs it).
func (e *Engine) readBefore(ctx context.Context, key Key, lo, back, spacing uint64, left int, fetched map[uint64]ent) error {
	from := lo + 1
	if k := uint64(left + left/2 + 2); spacing <= (back-lo)/k { // (no overflow)
		from = max(back-spacing*k, lo+1)
	}
	raw, _, err := e.rangeDecoded(ctx, key, from, back, nil, nil)
	for _, y := range raw {
		fetched[y.seq] = y
	}
	return err
}

// entryAt reads and decodes key's entry at seq; one that is gone means a pack or a deletion moved
// the log under the read (errShort: the read starts again from the last entry).
func (e *Engine) entryAt(ctx context.Context, key Key, seq uint64) (ent, error) {
	en, err := e.log.Get(ctx, key, seq)
	if errors.Is(err, ErrNotFound) {
		return ent{}, fmt.Errorf("session %s entry %d: %w", key, seq, errShort)
	}
	if err != nil {
		return ent{}, err
	}
	m, data, err := decodeEntry(en.Data)
	if err != nil {
		return ent{}, fmt.Errorf("session %s entry %d: %w", key, seq, err)
	}
	return ent{seq: seq, meta: m, data: data}, nil
}
