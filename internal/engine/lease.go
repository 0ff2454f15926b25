package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Leases and fencing (docs/format.md §8.9).
//
// A session's lease is part of the head every entry carries: acquiring, renewing or releasing it
// appends a state entry (the head unchanged but for its lease) with the compare-and-swap of a
// save. So a save's check "is this epoch the current one?" and its commit are one
// compare-and-swap: a lease taken meanwhile moves the last entry, the save's append fails and it
// checks again. A session leased before its first save has a head of version 0.

// LeaseRequest is one lease operation.
type LeaseRequest struct {
	Key   Key
	Owner string        // Acquire: who takes the lease
	TTL   time.Duration // Acquire and Renew: how long it holds without renewal
	Epoch uint64        // Renew and Release: the epoch the caller holds
	Force bool          // Acquire: take it even from a live owner
	Now   time.Time
}

// Takeover says whose lease an acquisition replaced: From is the previous owner ("" when nobody's),
// Forced that their lease had not expired (LeaseRequest.Force).
type Takeover struct {
	From   string
	Forced bool
}

// LeaseState is a session's lease and its head version.
type LeaseState struct {
	Lease Lease  // epoch 0 when none was ever acquired
	Head  uint64 // the head version (0: none yet)
}

// Acquire gives req.Owner the session's lease under a new epoch, one more than any before. It is
// refused while another owner holds a lease that has not expired, unless req.Force.
func (e *Engine) Acquire(ctx context.Context, req LeaseRequest) (LeaseState, Takeover, error) {
	if req.Owner == "" || req.TTL <= 0 {
		return LeaseState{}, Takeover{}, fmt.Errorf("%w: acquiring a lease needs an owner and a positive TTL", ErrBadRequest)
	}
	var took Takeover // set by the attempt that succeeds: changeHead may retry
	ls, err := e.changeHead(ctx, req.Key, func(h *headState) error {
		if h.Moved != nil {
			return &MovedError{Key: req.Key, Moved: *h.Moved}
		}
		cur := leaseOf(*h)
		held := cur.Held(req.Now)
		if held && cur.Owner != req.Owner && !req.Force {
			return &LeaseError{Key: req.Key, Lease: cur,
				Detail: fmt.Sprintf("leased by %s (epoch %d) until %s; wait for it to expire, or force a takeover", cur.Owner, cur.Epoch, cur.Expires.Format(time.RFC3339))}
		}
		if cur.Epoch >= MaxVersion {
			return fmt.Errorf("%w: the lease is at epoch %d, the largest there is", ErrBadRequest, cur.Epoch)
		}
		took = Takeover{From: cur.Owner, Forced: held && cur.Owner != req.Owner}
		h.Lease = &Lease{Epoch: cur.Epoch + 1, Owner: req.Owner, Acquired: req.Now.UTC(), Expires: req.Now.Add(req.TTL).UTC()}
		return nil
	})
	return ls, took, err
}

// Renew extends the lease of epoch req.Epoch by req.TTL from now. An expired lease nobody took
// over renews too: its epoch is still the current one.
func (e *Engine) Renew(ctx context.Context, req LeaseRequest) (LeaseState, error) {
	if req.TTL <= 0 {
		return LeaseState{}, fmt.Errorf("%w: renewing a lease needs a positive TTL", ErrBadRequest)
	}
	return e.changeHead(ctx, req.Key, func(h *headState) error {
		if h.Moved != nil {
			return &MovedError{Key: req.Key, Moved: *h.Moved}
		}
		if err := checkEpoch(*h, req.Key, req.Epoch); err != nil {
			return err
		}
		l := *h.Lease
		l.Expires = req.Now.Add(req.TTL).UTC()
		h.Lease = &l
		return nil
	})
}

// Release gives the lease of epoch req.Epoch up: the session is free, and that epoch can write no
// more. The epoch is kept, so the next acquisition's is higher.
func (e *Engine) Release(ctx context.Context, req LeaseRequest) (LeaseState, error) {
	return e.changeHead(ctx, req.Key, func(h *headState) error {
		if err := checkEpoch(*h, req.Key, req.Epoch); err != nil {
			return err
		}
		l := *h.Lease
		l.Owner, l.Expires = "", req.Now.UTC()
		h.Lease = &l
		return nil
	})
}

// LeaseStatus returns the session's lease (epoch 0 when none was ever acquired), from its last
// entry.
func (e *Engine) LeaseStatus(ctx context.Context, key Key) (LeaseState, error) {
	last, err := e.last(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return LeaseState{}, nil
	}
	if err != nil {
		return LeaseState{}, err
	}
	return LeaseState{Lease: leaseOf(last.meta.Head), Head: last.meta.Head.Version}, nil
}

// errUnchanged makes changeHead write nothing and succeed.
var errUnchanged = errors.New("unchanged")

// changeHead applies change to the session's head and appends it as a state entry, reading the
// head again when another writer came first.
func (e *Engine) changeHead(ctx context.Context, key Key, change func(*headState) error) (LeaseState, error) {
	for attempt := 0; attempt < maxSwapAttempts; attempt++ {
		s := e.session(key)
		ls, err := e.changeOnce(ctx, s, change)
		if e.again(ctx, s, err) {
			continue
		}
		if errors.Is(err, errUnchanged) {
			return ls, nil
		}
		return ls, err
	}
	return LeaseState{}, fmt.Errorf("%w: session %s: head kept moving after %d attempts", ErrBusy, key, maxSwapAttempts)
}

func (e *Engine) changeOnce(ctx context.Context, s *session, change func(*headState) error) (LeaseState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := e.load(ctx, s); err != nil {
		return LeaseState{}, err
	}
	h := s.last.Head
	err := change(&h)
	if errors.Is(err, errUnchanged) {
		return LeaseState{Lease: leaseOf(h), Head: h.Version}, err
	}
	if err != nil {
		return LeaseState{}, err
	}
	if err := e.writeState(ctx, s, h); err != nil {
		return LeaseState{}, err
	}
	return LeaseState{Lease: leaseOf(h), Head: h.Version}, nil
}

// writeState appends a state entry holding head h (s.mu held).
func (e *Engine) writeState(ctx context.Context, s *session, h headState) error {
	h.Pack, h.Deleted = s.lastPack(), s.lastDeleted()
	h.TailEntries++
	if s.last.Kind == kindPack {
		h.TailEntries, h.TailBytes, h.TailExtra = 1, 0, 0
	}
	m := entryMeta{Kind: kindState, Head: h}
	size, err := s.encodedSize(m, nil)
	if err != nil {
		return err
	}
	m.Head.TailBytes += size
	_, err = e.write(ctx, s, m, nil)
	return err
}

// writeDeletion appends a state entry that deletes the session, holding head h (s.mu held): the
// log starts again after it, with no pack before.
func (e *Engine) writeDeletion(ctx context.Context, s *session, h headState) error {
	h.Pack, h.TailEntries, h.TailBytes, h.TailExtra, h.Deleted = 0, 0, 0, 0, s.lastDeleted()
	if _, err := e.write(ctx, s, entryMeta{Kind: kindState, Head: h, Deletion: true}, nil); err != nil {
		return err
	}
	s.dropEncoder()
	s.recent.reset(true)
	return nil
}

func leaseOf(h headState) Lease {
	if h.Lease == nil {
		return Lease{}
	}
	return *h.Lease
}

// checkEpoch refuses an epoch that is not the session's current, unreleased one.
func checkEpoch(h headState, key Key, epoch uint64) error {
	cur := leaseOf(h)
	switch {
	case epoch == 0:
		return fmt.Errorf("%w: no lease epoch given", ErrBadRequest)
	case h.Lease == nil:
		return &LeaseError{Fenced: true, Key: key, Lease: cur, Detail: fmt.Sprintf("epoch %d is not current: no lease was ever acquired", epoch)}
	case epoch != cur.Epoch:
		return &LeaseError{Fenced: true, Key: key, Lease: cur,
			Detail: fmt.Sprintf("epoch %d is not current: the lease is at epoch %d, %s", epoch, cur.Epoch, ownerText(cur))}
	case cur.Owner == "":
		return &LeaseError{Fenced: true, Key: key, Lease: cur, Detail: fmt.Sprintf("epoch %d was released", epoch)}
	}
	return nil
}

func ownerText(l Lease) string {
	if l.Owner == "" {
		return "released"
	}
	return "owned by " + l.Owner
}

// checkWrite decides whether a save may write to the session: not if it moved (unless the save
// imports a version by migration, which brings the session back), not with a stale epoch, and not
// without an epoch while somebody holds the lease.
func checkWrite(h headState, key Key, epoch uint64, comingBack bool, now time.Time) error {
	if h.Moved != nil && !comingBack {
		return &MovedError{Key: key, Moved: *h.Moved}
	}
	if epoch != 0 {
		return checkEpoch(h, key, epoch)
	}
	if cur := leaseOf(h); cur.Held(now) {
		return &LeaseError{Key: key, Lease: cur,
			Detail: fmt.Sprintf("leased by %s (epoch %d) until %s; save with that lease's epoch", cur.Owner, cur.Epoch, cur.Expires.Format(time.RFC3339))}
	}
	return nil
}

// Seal marks the session moved to `to`, provided its head is still version expected: from then on
// it refuses writes (MovedError) while its versions stay readable, and its lease is over. Sealing
// again to the same place is a no-op.
func (e *Engine) Seal(ctx context.Context, key Key, expected uint64, to string, now time.Time) (Record, error) {
	var head headState
	_, err := e.changeHead(ctx, key, func(h *headState) error {
		head = *h
		if h.Version == 0 {
			return fmt.Errorf("session %s: %w", key, ErrNotFound)
		}
		if h.Version != expected {
			return &ConflictError{Key: key, Expected: expected, Head: h.Version}
		}
		if h.Moved != nil && h.Moved.To == to {
			return errUnchanged
		}
		h.Moved = &Moved{To: to, At: now.UTC()}
		if h.Lease != nil { // the lease ends here: its owner's writes go to the new home
			l := *h.Lease
			l.Owner, l.Expires = "", now.UTC()
			h.Lease = &l
		}
		return nil
	})
	if err != nil {
		return Record{}, err
	}
	return recordOf(key, head)
}
