package logstore

import (
	"context"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Fork starts session dst at version v of src, sharing src's stored messages: dst's first entry
// says "the first RawBytes of src's log, read up to sequence UpTo" (a stream sequence names one
// message of the stream, whatever its subject). Nothing is copied. Entries are never deleted
// while a session lives, so the shared ones stay; docs/format.md §8 ("Forks") says what deleting
// the source must do.
func (s *Store) Fork(ctx context.Context, src wire.Key, v uint64, dst wire.Key, saveID string) (Record, error) {
	// The fork's head needs the SHA-256 state at v, which only v's own entry holds: read it.
	subject := LogSubject(src)
	_, last, err := s.getLast(ctx, subject)
	if err != nil {
		return Record{}, fmt.Errorf("%s: %w", src, err)
	}
	entries, err := s.readLog(ctx, subject, last, int(min(v, 1<<20))+8, func(e entry) bool { return e.kind != KindLease && e.meta.Head.Version == v })
	if err != nil {
		return Record{}, err
	}
	at := entries[len(entries)-1]
	if at.kind == KindLease || at.meta.Head.Version != v {
		return Record{}, fmt.Errorf("%w: %s has no version %d", ErrNoVersion, src, v)
	}
	target, err := s.session(ctx, dst)
	if err != nil {
		return Record{}, err
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	if target.lastSeq != 0 {
		return Record{}, fmt.Errorf("%w: fork target %s exists", ErrConflict, dst)
	}
	head := at.meta.Head
	head.Version, head.Lease = 1, nil
	meta := Meta{Head: head, SaveID: saveID, Time: nowMillis(),
		Fork: &Fork{Subject: subject, UpTo: at.seq, RawBytes: head.RawBytes}}
	body, err := encodeEntry(KindFork, meta, nil)
	if err != nil {
		return Record{}, err
	}
	seq, err := s.publish(ctx, target.subject, body, 0)
	if err != nil {
		return Record{}, err
	}
	target.lastSeq, target.last = seq, meta
	return recordOf(meta)
}
