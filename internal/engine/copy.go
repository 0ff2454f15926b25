package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// Copying sessions in exactly as another store kept them: the upgrade from format 2
// (internal/upgrade, docs/format.md §8.17) writes every kept version with its own number, parent,
// save id, writer, reason, dialect, creation time, fork and origin, then the session's lease and
// seal as they were. A client's save cannot do that (its number, parent and time are the
// engine's; an import keeps number, time and hash but records an origin and takes the head as
// its parent), so these are separate entry points, for the upgrade only: they check neither
// leases nor seals (the copied state comes last, with CopyState) and never come from a request.

// CopyVersion appends version rec.Version of rec.Key, whose conversation is conv (its canonical
// bytes), exactly as rec says: number, parent, save id, writer, reason, dialect, created, forkOf
// and origin are rec's; conv must have rec's hash, size and counts. Only StoredBytes is the
// engine's own (what this entry stored). The session's versions are copied oldest first without
// gaps: the first copied version (any number ≥ 1) becomes the session's first version, the ones
// below it were pruned or never here, and each later one must be the head's next. A version not
// above the head is refused (ConflictError), as is a conversation that does not match its record
// (ErrHashMismatch); nothing is written then.
func (e *Engine) CopyVersion(ctx context.Context, rec Record, conv []byte) (Record, error) {
	if rec.Version < 1 || rec.Version > MaxVersion {
		return Record{}, fmt.Errorf("%w: copying version %d of %s: versions are 1..%d", ErrBadRequest, rec.Version, rec.Key, MaxVersion)
	}
	if rec.Dialect == codec.DialectNative {
		rec.Dialect = ""
	}
	if err := codec.CheckDialect(rec.Dialect); err != nil {
		return Record{}, fmt.Errorf("copying version %d of %s: %w", rec.Version, rec.Key, err)
	}
	for attempt := 0; attempt < maxSwapAttempts; attempt++ {
		s := e.session(rec.Key)
		out, err := e.copyOnce(ctx, s, rec, conv)
		if errors.Is(err, ErrConflict) || errors.Is(err, errShort) {
			e.forget(s)
			continue
		}
		if err != nil && !IsRefusal(err) {
			e.forget(s)
		}
		return out, err
	}
	return Record{}, fmt.Errorf("%w: session %s: head kept moving after %d attempts", ErrBusy, rec.Key, maxSwapAttempts)
}

func (e *Engine) copyOnce(ctx context.Context, s *session, rec Record, conv []byte) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := e.load(ctx, s); err != nil {
		return Record{}, err
	}
	h := s.last.Head
	switch {
	case rec.Version <= h.Version:
		return Record{}, &ConflictError{Key: rec.Key, Expected: rec.Version - 1, Head: h.Version,
			Detail: fmt.Sprintf("cannot copy version %d: the head is already version %d", rec.Version, h.Version)}
	case h.Version > 0 && rec.Version != h.Version+1:
		return Record{}, &ConflictError{Key: rec.Key, Expected: rec.Version - 1, Head: h.Version,
			Detail: fmt.Sprintf("cannot copy version %d after version %d: versions are copied without gaps", rec.Version, h.Version)}
	}
	if err := checkDialect(rec.Key, h, h.Version > 0, rec.Dialect); err != nil {
		return Record{}, err
	}
	p, err := e.plan(ctx, s, SaveRequest{Key: rec.Key, Payload: conv, Limits: dialectLimits(rec.Dialect)})
	if err != nil {
		return Record{}, fmt.Errorf("copying version %d of %s: %w", rec.Version, rec.Key, err)
	}
	return e.commitCopy(ctx, s, rec, p)
}

// commitCopy is commit (save.go) with every record field taken from rec, and rec's hash, size
// and counts checked against what the plan stores.
func (e *Engine) commitCopy(ctx context.Context, s *session, rec Record, p savePlan) (Record, error) {
	h := s.last.Head
	next := h
	raw := p.newBytes()
	state := h.State
	if p.rewrite {
		state = p.keepState
	}
	var err error
	if next.State, err = extendHash(state, raw); err != nil {
		return Record{}, err
	}
	next.RawBytes, next.Counts = p.keepBytes+int64(len(raw)), p.counts
	hash, err := finish(next.State)
	if err != nil {
		return Record{}, err
	}
	if hash != rec.Hash || next.RawBytes+2 != rec.RawBytes || next.Counts != rec.Counts {
		return Record{}, fmt.Errorf("%w: copying version %d of %s: the record says %s, %d bytes, counts %+v; the conversation is %s, %d bytes, counts %+v",
			ErrHashMismatch, rec.Version, rec.Key, rec.Hash, rec.RawBytes, rec.Counts, hash, next.RawBytes+2, next.Counts)
	}
	next.Version, next.Parent = rec.Version, rec.Parent
	next.SaveID, next.Writer, next.Reason, next.Dialect = rec.SaveID, rec.Writer, rec.Reason, rec.Dialect
	next.Created, next.ForkOf, next.Origin = rec.Created.UTC(), copyFork(rec.ForkOf), copyOrigin(rec.Origin)
	if h.Version == 0 && rec.Version > 1 {
		next.FirstVersion = rec.Version // the versions before it were pruned, or never here
	}
	next.Pack, next.Deleted = s.lastPack(), s.lastDeleted()
	next.TailEntries, next.TailBytes = h.TailEntries+1, h.TailBytes
	if s.last.Kind == kindPack {
		next.TailEntries, next.TailBytes, next.TailExtra = 1, 0, 0
	}
	saved, err := e.commitHead(ctx, s, next, p, raw, nil)
	return saved.Record, err
}

func copyFork(f *ForkRef) *ForkRef {
	if f == nil {
		return nil
	}
	c := *f
	return &c
}

func copyOrigin(o *Origin) *Origin {
	if o == nil {
		return nil
	}
	c := *o
	c.At = c.At.UTC()
	return &c
}

// CopyState sets key's lease and seal to exactly lease and moved (nil: none), as another store
// kept them, with one state entry; the versions are unchanged. A session with no version yet
// gets a head of version 0 holding them (a lease taken before the first save, or kept by a
// deletion). Nothing is written when the head already holds them.
func (e *Engine) CopyState(ctx context.Context, key Key, lease *Lease, moved *Moved) error {
	if lease != nil && lease.Epoch > MaxVersion {
		return fmt.Errorf("%w: copying the lease of %s: epoch %d (at most %d)", ErrBadRequest, key, lease.Epoch, MaxVersion)
	}
	_, err := e.changeHead(ctx, key, func(h *headState) error {
		var l *Lease
		if lease != nil {
			c := *lease
			c.Acquired, c.Expires = c.Acquired.UTC(), c.Expires.UTC()
			l = &c
		}
		var mv *Moved
		if moved != nil {
			c := *moved
			c.At = c.At.UTC()
			mv = &c
		}
		if SameLease(h.Lease, l) && SameMoved(h.Moved, mv) {
			return errUnchanged
		}
		h.Lease, h.Moved = l, mv
		return nil
	})
	return err
}

// HeadState is what a session's last entry says: its head version's record (Version 0: none),
// the oldest version kept, its lease and its seal.
type HeadState struct {
	Record       Record
	FirstVersion uint64 // the oldest version kept (1 when none was pruned; 0 with no version)
	Lease        *Lease
	Moved        *Moved
}

// HeadState reads key's last entry (one read): ErrNotFound if its log is empty.
func (e *Engine) HeadState(ctx context.Context, key Key) (HeadState, error) {
	last, err := e.last(ctx, key)
	if err != nil {
		return HeadState{}, err
	}
	h := last.meta.Head
	hs := HeadState{Record: Record{Key: key}, Lease: h.Lease, Moved: h.Moved}
	if h.Version > 0 {
		if hs.Record, err = recordOf(key, h); err != nil {
			return HeadState{}, err
		}
		hs.FirstVersion = max(h.FirstVersion, 1)
	}
	return hs, nil
}

// SameLease reports whether two leases are the same (both nil, or the same epoch, owner and
// times, whatever their time zones): what CopyState and the upgrade's check compare.
func SameLease(a, b *Lease) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Epoch == b.Epoch && a.Owner == b.Owner && a.Acquired.Equal(b.Acquired) && a.Expires.Equal(b.Expires)
}

// SameMoved reports whether two seals are the same (both nil, or the same destination and time).
func SameMoved(a, b *Moved) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.To == b.To && a.At.Equal(b.At)
}
