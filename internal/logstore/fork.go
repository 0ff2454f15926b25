package logstore

import (
	"context"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Fork starts session dst at version v of src, sharing src's stored messages: dst's first entry
// says "the first RawBytes of src's log, read up to sequence UpTo" (a stream sequence names one
// message of the stream, whatever its subject). Nothing is copied. The prototype does not guard
// the shared entries: a pack of src deletes those it packs, and dst can no longer be read;
// docs/format.md §8.11 says what the engine must do (pins).
func (s *Store) Fork(ctx context.Context, src wire.Key, v uint64, dst wire.Key, saveID string) (Record, error) {
	// The fork's head needs the SHA-256 state at v, which only v's own entry holds: read it.
	subject := LogSubject(src)
	_, last, err := s.getLast(ctx, subject)
	if err != nil {
		return Record{}, fmt.Errorf("%s: %w", src, err)
	}
	entries, err := s.readLog(ctx, subject, last, int(min(v, 1<<20))+8, holds(v))
	if err != nil {
		return Record{}, err
	}
	at := entries[len(entries)-1]
	if !holds(v)(at) {
		return Record{}, fmt.Errorf("%w: %s has no version %d", ErrNoVersion, src, v)
	}
	if at.kind == KindPack {
		// The state at v is not kept in a pack: hash v's conversation again (forks are rare).
		conv, _, err := s.Restore(ctx, src, v)
		if err != nil {
			return Record{}, err
		}
		rec, _ := packedRecord(at, v)
		at.meta.Head.Messages, at.meta.Head.RawBytes = rec.Messages, rec.RawBytes-2
		if at.meta.Head.State, _, err = extendHash(nil, conv[1:len(conv)-1]); err != nil {
			return Record{}, err
		}
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
	head.Pack, head.TailEntries, head.TailBytes = 0, 0, 0
	meta := Meta{Head: head, SaveID: saveID, Time: nowMillis(),
		Fork: &Fork{Subject: subject, UpTo: at.seq, Version: v, RawBytes: head.RawBytes}}
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
