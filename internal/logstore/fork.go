package logstore

import (
	"context"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Fork starts session dst at version v of src, sharing src's stored messages: one entry on dst's
// log subject whose layout refers to src's extents by stream sequence (a sequence names a
// message in the whole stream, whatever its subject). Nothing is copied.
//
// The prototype does not protect the shared extents: a merge of src purges them, and dst can no
// longer be read. docs/format.md §8 ("Forks") says what the engine must do.
func (s *Store) Fork(ctx context.Context, src wire.Key, v uint64, dst wire.Key, saveID string) (Record, error) {
	// The fork's head needs the SHA-256 state at v, which only v's own save entry held: the fork
	// reads v (which also checks it) and hashes it again. Forks are rare; reads are cheap.
	conv, rec, err := s.Restore(ctx, src, v)
	if err != nil {
		return Record{}, err
	}
	state, _, err := extendHash(nil, conv[1:len(conv)-1])
	if err != nil {
		return Record{}, err
	}
	sess, err := s.session(ctx, src)
	if err != nil {
		return Record{}, err
	}
	sess.mu.Lock()
	layout, err := s.fullLayout(ctx, sess)
	sess.mu.Unlock()
	if err != nil {
		return Record{}, err
	}
	shared := sharedPrefix(layout, rec.RawBytes-2)

	target, err := s.session(ctx, dst)
	if err != nil {
		return Record{}, err
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	if target.lastSeq != 0 {
		return Record{}, fmt.Errorf("%w: fork target %s exists", ErrConflict, dst)
	}
	head := Head{Version: 1, Messages: rec.Messages, RawBytes: rec.RawBytes - 2, State: state, Layout: shared}
	frec := Record{Version: 1, SaveID: saveID, Time: nowMillis(), Messages: rec.Messages, RawBytes: rec.RawBytes, Hash: rec.Hash}
	own := &Extent{From: 1, To: 1, Frame: true}
	body, err := encodeEntry(KindFork, Meta{Head: &head, Record: &frec, Own: own}, nil)
	if err != nil {
		return Record{}, err
	}
	seq, err := s.publish(ctx, target.subject, body, 0)
	if err != nil {
		return Record{}, err
	}
	target.commit(seq, head, own, &frec)
	return frec, nil
}

// sharedPrefix is the extents holding the first raw bytes of layout, marked shared, the last cut
// to what is needed.
func sharedPrefix(layout []Extent, raw int64) []Extent {
	var out []Extent
	for _, e := range layout {
		if raw <= 0 {
			break
		}
		e.Shared, e.From, e.To = true, 0, 0
		if e.RawBytes >= raw {
			e.Cut, e.RawBytes = e.Cut || e.RawBytes > raw, raw
		}
		raw -= e.RawBytes
		out = append(out, e)
	}
	return out
}
