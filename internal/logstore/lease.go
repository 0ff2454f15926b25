package logstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// ErrLeased is returned when a lease is asked for while another owner holds it.
var ErrLeased = errors.New("logstore: leased by another owner")

// TakeLease gives owner the session's lease for ttl, with an epoch one above the last, written as
// a lease entry on the log subject (compare-and-swapped like a save). Every later log entry
// carries the lease in its head, so a save's fencing check and its commit are one write.
func (s *Store) TakeLease(ctx context.Context, k wire.Key, owner string, ttl time.Duration) (Lease, error) {
	for attempt := 0; ; attempt++ {
		sess, err := s.session(ctx, k)
		if err != nil {
			return Lease{}, err
		}
		l, err := s.takeLease(ctx, sess, owner, ttl)
		if errors.Is(err, ErrConflict) && attempt < 3 {
			s.forget(sess)
			continue
		}
		return l, err
	}
}

func (s *Store) takeLease(ctx context.Context, sess *session, owner string, ttl time.Duration) (Lease, error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	old := sess.last.Head.Lease
	if old != nil && old.Owner != owner && old.Expires > nowMillis() {
		return Lease{}, fmt.Errorf("%w: %s held by %q until %s", ErrLeased, sess.key, old.Owner,
			time.UnixMilli(old.Expires).UTC().Format(time.RFC3339))
	}
	l := Lease{Owner: owner, Epoch: 1, Expires: time.Now().Add(ttl).UnixMilli()}
	if old != nil {
		l.Epoch = old.Epoch + 1
	}
	meta := Meta{Head: sess.last.Head}
	meta.Head.Lease = &l
	meta.Head.Pack = sess.lastPack()
	meta.Head.TailEntries++
	body, err := encodeEntry(KindLease, meta, nil)
	if err != nil {
		return Lease{}, err
	}
	seq, err := s.publish(ctx, sess.subject, body, int64(sess.lastSeq))
	if err != nil {
		return Lease{}, err
	}
	sess.lastSeq, sess.last = seq, meta
	return l, nil
}
