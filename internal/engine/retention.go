package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Retention says which versions of a session to keep. The head is always kept. Zero values keep
// everything.
type Retention struct {
	KeepLast int           // keep at least the newest KeepLast versions (0: no count limit)
	MaxAge   time.Duration // keep versions younger than this (0: no age limit)
}

// Pruned says what a prune removed, or would remove.
type Pruned struct {
	Key      Key
	Versions []uint64 // removed (or, in a dry run, to be removed)
	Kept     int
}

// Prune removes the versions of a session that ret does not keep: a version is kept if it is the
// head, among the newest KeepLast, or younger than MaxAge (with both limits set, a version goes
// only if both would remove it). Versions are numbered in the order they were made, so the
// removed ones are the oldest: the head's first version moves forward, with a state entry
// (docs/format.md §8.13), and reads and history no longer see the versions before it. Their
// records stay in the packs that hold them, and their messages are the kept versions' too (a
// conversation grows by appends): what a prune frees on disk is only dropped rewrites' bytes, once
// the log is repacked (not done yet).
func (e *Engine) Prune(ctx context.Context, key Key, ret Retention, now time.Time, dryRun bool) (Pruned, error) {
	for attempt := 0; attempt < maxSwapAttempts; attempt++ {
		res, err := e.pruneOnce(ctx, key, ret, now, dryRun)
		if errors.Is(err, errMovedOn) {
			continue // the session was deleted (and saved again) under the prune: decide again
		}
		return res, err
	}
	return Pruned{}, fmt.Errorf("%w: session %s: deleted again and again during the prune", ErrBusy, key)
}

// errMovedOn: the session a prune decided on is not the one it would change.
var errMovedOn = errors.New("the session was deleted under the prune")

func (e *Engine) pruneOnce(ctx context.Context, key Key, ret Retention, now time.Time, dryRun bool) (Pruned, error) {
	res := Pruned{Key: key, Versions: []uint64{}}
	if ret.KeepLast <= 0 && ret.MaxAge <= 0 {
		return res, nil
	}
	// The session the history below is of: read first, so that a deletion after it shows.
	before, err := e.last(ctx, key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return res, nil
		}
		return res, err
	}
	all, err := e.History(ctx, key)
	if err != nil || len(all) == 0 {
		return res, err
	}
	head := all[len(all)-1].Version
	cut := uint64(0) // remove every version up to and including cut
	for _, r := range all {
		byCount := ret.KeepLast <= 0 || head-r.Version >= uint64(ret.KeepLast)
		byAge := ret.MaxAge <= 0 || now.Sub(r.Created) > ret.MaxAge
		if r.Version == head || !byCount || !byAge {
			break // versions are in creation order: everything from here on is kept
		}
		cut = r.Version
		res.Versions = append(res.Versions, r.Version)
	}
	res.Kept = len(all) - len(res.Versions)
	if cut == 0 || dryRun {
		return res, nil
	}
	// Forks reading versions to be removed copy them in first.
	st, err := e.last(ctx, key)
	if err != nil {
		return res, err
	}
	if err := e.releasePins(ctx, key, st.meta.Head.Pins, cut); err != nil {
		return res, err
	}
	_, err = e.changeHead(ctx, key, func(h *headState) error {
		if h.Version == 0 {
			return fmt.Errorf("session %s: %w", key, ErrNotFound)
		}
		if h.Deleted != sinceOf(before) || cut >= h.Version {
			return errMovedOn // not the versions the cut was decided on
		}
		if h.FirstVersion > cut {
			return errUnchanged // a prune or a save came first
		}
		for _, p := range h.Pins {
			if p.Version <= cut {
				return fmt.Errorf("%w: session %s: a fork of version %d came in during the prune; prune again", ErrBusy, key, p.Version)
			}
		}
		h.FirstVersion = cut + 1
		return nil
	})
	return res, err
}

// pinnedError says forks read the session (deleteOnce).
type pinnedError struct{ pins []forkPin }

func (e *pinnedError) Error() string { return fmt.Sprintf("%d forks read the session", len(e.pins)) }

// Delete removes the session: a deletion entry (a state entry of version 0, the commit point, by
// a compare-and-swap), then every entry before it. expected, when set, is the version the head
// must still be. A session that was ever leased keeps its last epoch in that entry, so that a
// later acquisition's epoch is still higher than any before and an old holder's late write stays
// fenced; a session never leased keeps the entry too (a few hundred bytes): the log has no
// conditional purge, and an unconditional one could remove a save another daemon made after the
// deletion. Every later entry names the deletion (Head.Deleted): reads start there, and a crash
// before the deletes leaves entries the session's next pack deletes.
// Forks reading the session are copied in first; one being written right then (pinned, no fork
// entry yet, within 2 × ValueGrace of its pin) makes the deletion refuse with ErrBusy: try again.
func (e *Engine) Delete(ctx context.Context, key Key, expected *uint64) (Record, error) {
	for attempt := 0; attempt < maxSwapAttempts; attempt++ {
		s := e.session(key)
		rec, upTo, err := e.deleteOnce(ctx, s, expected)
		var pinned *pinnedError
		if errors.As(err, &pinned) {
			// Forks read this session: copy them in first (each one's pack unpins it).
			if err := e.releasePins(ctx, key, pinned.pins, 0); err != nil {
				return Record{}, err
			}
			continue
		}
		if e.again(ctx, s, err) {
			continue
		}
		if err != nil {
			return Record{}, err
		}
		var dead []uint64
		err = e.log.Range(ctx, key, 0, upTo-1, func(en Entry) bool {
			dead = append(dead, en.Seq)
			return true
		})
		if err == nil && len(dead) > 0 {
			err = e.log.Delete(ctx, key, dead...)
		}
		return rec, err
	}
	return Record{}, fmt.Errorf("%w: session %s: head kept moving after %d attempts", ErrBusy, key, maxSwapAttempts)
}

func (e *Engine) deleteOnce(ctx context.Context, s *session, expected *uint64) (Record, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := e.load(ctx, s); err != nil {
		return Record{}, 0, err
	}
	h := s.last.Head
	if h.Version == 0 {
		return Record{}, 0, fmt.Errorf("session %s: %w", s.key, ErrNotFound)
	}
	if expected != nil && h.Version != *expected {
		return Record{}, 0, &ConflictError{Key: s.key, Expected: *expected, Head: h.Version}
	}
	if len(h.Pins) > 0 {
		return Record{}, 0, &pinnedError{pins: h.Pins}
	}
	rec, err := recordOf(s.key, h)
	if err != nil {
		return Record{}, 0, err
	}
	t := emptyHead()
	if h.Lease != nil {
		l := *h.Lease
		l.Owner = ""
		t.Lease = &l
	}
	if err := e.writeDeletion(ctx, s, t); err != nil {
		return Record{}, 0, err
	}
	return rec, s.lastSeq, nil
}
