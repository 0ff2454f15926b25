package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sweeping values (mark and sweep through a trash).
//
// A value no session's log refers to any more (its sessions deleted, or rewritten without it) is
// garbage. engine.Log offers no compare-and-swap on values, so a sweep cannot tell a value
// nothing refers to from one a save in flight has just made sure of and is about to commit a
// reference to. The trash settles that with time:
//
//   - A save makes sure of each value it refers to (PutValue: stored, or found stored) at most
//     ValueGrace/2 before, and commits within ValueGrace of that or not at all (ErrBusy).
//   - A sweep marks (reads every live entry of the namespace: the values their pieces list), then
//     moves each value nothing refers to into the trash: a value "trash-<id>" holding the time and
//     the blob, written before the value is deleted. Readers that miss a value read its trash.
//   - A later sweep settles a trash entry at least 2 × ValueGrace old (one grace for saves under
//     way when it was swept, one for clocks apart): if its mark (taken after that) finds the value
//     referred to and the value gone, it puts it back; then the trash entry goes.
//
// A save that made sure of a value after it was swept stored it again (a value is created once,
// and it was gone). A crash anywhere leaves the value, its trash entry or both, never neither while
// it can be referred to.

const trashPrefix = "trash-"

func trashID(id string) string { return trashPrefix + id }

// trashed returns the time value id of ns was swept and its blob, from its trash entry.
func (e *Engine) trashed(ctx context.Context, ns, id string) (time.Time, []byte, error) {
	b, err := e.log.Value(ctx, ns, trashID(id))
	if err != nil {
		return time.Time{}, nil, err
	}
	if len(b) < 8 {
		return time.Time{}, nil, fmt.Errorf("%w: trash entry of value %s of namespace %q", ErrCorrupt, id, ns)
	}
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b))), b[8:], nil
}

// ValueSweep is what one SweepValues did.
type ValueSweep struct {
	Trashed    int   // values nothing referred to, moved to the trash
	Restored   int   // swept values a save had referred to meanwhile, put back
	Deleted    int   // trash entries settled: their values are gone
	FreedBytes int64 // the blob bytes of those
}

// SweepValues sweeps the values of namespace ns: it settles the trash entries old enough, and
// moves the values nothing refers to into the trash. The housekeeping round runs it now and then;
// a value is gone for good two sweeps and 2 × ValueGrace after nothing referred to it.
func (e *Engine) SweepValues(ctx context.Context, ns string) (ValueSweep, error) {
	var res ValueSweep
	var ids []string
	inTrash := map[string]bool{}
	err := e.log.Values(ctx, ns, func(id string) bool {
		if strings.HasPrefix(id, trashPrefix) {
			inTrash[id[len(trashPrefix):]] = true
		} else {
			ids = append(ids, id)
		}
		return true
	})
	if err != nil {
		return res, err
	}
	start := e.cfg.Clock()
	inUse, err := e.referencedValues(ctx, ns)
	if err != nil {
		return res, err
	}
	for id := range inTrash {
		if err := e.settle(ctx, ns, id, inUse[id], start, &res); err != nil {
			return res, err
		}
	}
	for _, id := range ids {
		if inUse[id] || inTrash[id] {
			continue
		}
		blob, err := e.log.Value(ctx, ns, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return res, err
		}
		t := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(blob)), uint64(e.cfg.Clock().UnixMilli()))
		if err := e.log.PutValue(ctx, ns, trashID(id), append(t, blob...)); err != nil {
			return res, err
		}
		if err := e.log.DeleteValue(ctx, ns, id); err != nil {
			return res, err
		}
		res.Trashed++
	}
	return res, nil
}

// settle ends the trash entry of value id if it was swept long enough before the mark: putting
// the value back if the mark found it referred to and it is gone.
func (e *Engine) settle(ctx context.Context, ns, id string, used bool, mark time.Time, res *ValueSweep) error {
	at, blob, err := e.trashed(ctx, ns, id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if mark.Sub(at) < 2*e.cfg.ValueGrace {
		return nil // saves that made sure of it before it was swept may still commit
	}
	if used {
		if _, err := e.log.Value(ctx, ns, id); errors.Is(err, ErrNotFound) {
			if err := e.log.PutValue(ctx, ns, id, blob); err != nil {
				return err
			}
			res.Restored++
		} else if err != nil {
			return err
		}
	} else {
		res.Deleted++
		res.FreedBytes += int64(len(blob))
	}
	return e.log.DeleteValue(ctx, ns, trashID(id))
}

// referencedValues returns the ids of the values the live entries of namespace ns list.
func (e *Engine) referencedValues(ctx context.Context, ns string) (map[string]bool, error) {
	ids := map[string]bool{}
	mark := func(p pieceInfo) {
		for _, v := range p.Values {
			ids[v.ID] = true
		}
	}
	for cursor := uint64(0); ; {
		keys, next, err := e.log.Sessions(ctx, ns, cursor, 1000)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if err := e.markSession(ctx, k, mark); err != nil {
				return nil, fmt.Errorf("values of %s: %w", k, err)
			}
		}
		if next == 0 {
			return ids, nil
		}
		cursor = next
	}
}

// markSession calls mark with every piece of key's live entries.
func (e *Engine) markSession(ctx context.Context, key Key, mark func(pieceInfo)) error {
	for attempt := 0; ; attempt++ {
		last, err := e.last(ctx, key)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		entries, err := e.entriesFor(ctx, key, sinceOf(last), last.seq, false)
		if errors.Is(err, errShort) && attempt+1 < maxReadAttempts {
			continue
		}
		if err != nil {
			return err // its values would look unused: sweep nothing rather than guess
		}
		for _, x := range entries {
			switch x.meta.Kind {
			case kindSave:
				for _, p := range x.meta.Group {
					mark(p.Piece)
				}
				mark(*x.meta.Piece)
			case kindPack:
				for _, p := range x.meta.Packed {
					mark(p.Piece)
				}
			}
		}
		return nil
	}
}
