package snapshot

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Leases and fencing.
//
// A session's lease lives in its head record, next to the version: acquiring a lease swaps the
// head like a save does. So the check "is this save's epoch the current one?" and the commit of the
// save are one compare-and-swap, and no interleaving of a takeover and a late write of the old
// owner can let that write in. A session leased before its first save has a head with version 0.

// ErrLeased matches a *LeaseError that is not Fenced, ErrFenced one that is.
var (
	ErrLeased = errors.New("session leased by another owner")
	ErrFenced = errors.New("lease epoch is not current")
	ErrMoved  = errors.New("session moved")
)

// LeaseError refuses a lease operation or a save because of the session's lease.
type LeaseError struct {
	Fenced bool // the epoch sent is not the current one (ErrFenced); else another owner holds the lease (ErrLeased)
	Key    Key
	Lease  Lease // the current lease
	Detail string
}

func (e *LeaseError) Error() string {
	return fmt.Sprintf("session %s: %s", e.Key, e.Detail)
}

// Is makes errors.Is match ErrLeased or ErrFenced, as Fenced says.
func (e *LeaseError) Is(target error) bool {
	return (target == ErrLeased && !e.Fenced) || (target == ErrFenced && e.Fenced)
}

// MovedError refuses a write to a session that was migrated away.
type MovedError struct {
	Key   Key
	Moved Moved
}

func (e *MovedError) Error() string {
	return fmt.Sprintf("session %s moved to %s at %s; write there", e.Key, e.Moved.To, e.Moved.At.Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrMoved) true.
func (e *MovedError) Is(target error) bool { return target == ErrMoved }

// LeaseRequest is one lease operation.
type LeaseRequest struct {
	Key   Key
	Owner string        // Acquire: who takes the lease
	TTL   time.Duration // Acquire and Renew: how long it holds without renewal
	Epoch uint64        // Renew and Release: the epoch the caller holds
	Force bool          // Acquire: take it even from a live owner
	Now   time.Time
}

// Acquire gives req.Owner the session's lease under a new epoch, one more than any before. It is
// refused while another owner holds a lease that has not expired, unless req.Force.
func Acquire(ctx context.Context, st Store, req LeaseRequest) (Lease, error) {
	l, _, err := AcquireTakingOver(ctx, st, req)
	return l, err
}

// Takeover says whose lease an acquisition replaced: From is the previous owner ("" when nobody's:
// never acquired, or released), Forced that their lease had not expired (req.Force).
type Takeover struct {
	From   string
	Forced bool
}

// AcquireTakingOver is Acquire, also saying whose lease it replaced (for the daemon's metrics).
func AcquireTakingOver(ctx context.Context, st Store, req LeaseRequest) (Lease, Takeover, error) {
	if req.Owner == "" || req.TTL <= 0 {
		return Lease{}, Takeover{}, fmt.Errorf("%w: acquiring a lease needs an owner and a positive TTL", ErrBadRequest)
	}
	var took Takeover // set by the attempt that succeeds: swapLease may retry
	l, err := swapLease(ctx, st, req.Key, func(h *Head) error {
		if h.Moved != nil {
			return &MovedError{Key: req.Key, Moved: *h.Moved}
		}
		cur := leaseOf(*h)
		held := cur.Held(req.Now)
		if held && cur.Owner != req.Owner && !req.Force {
			return &LeaseError{Key: req.Key, Lease: cur,
				Detail: fmt.Sprintf("leased by %s (epoch %d) until %s; wait for it to expire, or force a takeover", cur.Owner, cur.Epoch, cur.Expires.Format(time.RFC3339))}
		}
		took = Takeover{From: cur.Owner, Forced: held && cur.Owner != req.Owner}
		h.Lease = &Lease{Key: req.Key, Epoch: cur.Epoch + 1, Owner: req.Owner, Acquired: req.Now.UTC(), Expires: req.Now.Add(req.TTL).UTC()}
		return nil
	})
	return l, took, err
}

// swapLease applies change to the session's head (an empty one if it has none) and swaps it in.
func swapLease(ctx context.Context, st Store, key Key, change func(*Head) error) (Lease, error) {
	for attempt := 0; attempt < maxSwapAttempts; attempt++ {
		h, rev, err := st.Head(ctx, key)
		if errors.Is(err, ErrNotFound) {
			h, rev = emptyHead(key), 0
		} else if err != nil {
			return Lease{}, err
		}
		if err := change(&h); err != nil {
			return Lease{}, err
		}
		err = st.SwapHead(ctx, h, rev)
		if errors.Is(err, ErrRevisionMismatch) {
			continue
		}
		if err != nil {
			return Lease{}, err
		}
		return leaseOf(h), nil
	}
	return Lease{}, fmt.Errorf("%w: session %s: head kept moving after %d attempts", ErrBusy, key, maxSwapAttempts)
}

func leaseOf(h Head) Lease {
	l := Lease{Key: h.Key}
	if h.Lease != nil {
		l = *h.Lease
	}
	l.Head = h.Version.Version
	return l
}

// checkEpoch refuses an epoch that is not the session's current, unreleased one.
func checkEpoch(h Head, key Key, epoch uint64) error {
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
// imports a version, which brings the session back), not with a stale epoch, and not without an
// epoch while somebody holds the lease.
func checkWrite(h Head, key Key, epoch uint64, importing bool, now time.Time) error {
	if h.Moved != nil && !importing {
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

// Delete removes the session: its head (the commit point, by a swap), then everything stored under
// it. expected, when set, is the version the head must still be. A session that was ever leased
// keeps a head of version 0 holding its last epoch, so that a later acquisition's epoch is still
// higher than any before and an old holder's late write stays fenced.
func Delete(ctx context.Context, st Store, key Key, expected *uint64) (Version, error) {
	for attempt := 0; attempt < maxSwapAttempts; attempt++ {
		h, rev, err := st.Head(ctx, key)
		if err == nil && !h.Exists() && h.Lease != nil {
			err = ErrNotFound // only a tombstone: nothing to delete
		}
		if err != nil {
			return Version{}, err
		}
		if expected != nil && h.Version.Version != *expected {
			return Version{}, &ConflictError{Key: key, Expected: *expected, Head: h.Version.Version}
		}
		var keep *Head
		if h.Lease != nil {
			t := emptyHead(key)
			l := *h.Lease
			l.Owner, l.Head = "", 0
			t.Lease = &l
			keep = &t
		}
		err = st.DeleteSession(ctx, key, rev, keep)
		if errors.Is(err, ErrRevisionMismatch) {
			// A renewal, compaction or save moved the head: look again, after a random pause
			// once it has happened twice, so that a writer moving the head in step with our
			// read and swap (a holder renewing as fast as it can) cannot win every round.
			if err := jitter(ctx, attempt); err != nil {
				return Version{}, err
			}
			continue
		}
		return h.Version, err
	}
	return Version{}, fmt.Errorf("%w: session %s: head kept moving after %d attempts", ErrBusy, key, maxSwapAttempts)
}

// jitter sleeps a random time up to a bound that doubles with each attempt from the second (1, 2,
// 4 ... 32 ms), or returns ctx's error.
func jitter(ctx context.Context, attempt int) error {
	if attempt < 1 {
		return nil
	}
	t := time.NewTimer(time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt-1, 5))))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
