package logstore

import (
	"context"
	"errors"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// fullLayout is the head's layout: its prefix (the entry's own Layout, or Base's, read once and
// cached), then Since, then the last entry's own extent. The session's lock must be held.
func (s *Store) fullLayout(ctx context.Context, sess *session) ([]Extent, error) {
	prefix := sess.head.Layout
	if prefix == nil && sess.head.Base != 0 {
		if sess.layout == nil {
			body, err := s.getMany(ctx, []uint64{sess.head.Base})
			if err != nil {
				return nil, fmt.Errorf("%s: the layout at seq %d: %w", sess.subject, sess.head.Base, err)
			}
			_, meta, _, err := decodeEntry(body[0])
			if err != nil {
				return nil, fmt.Errorf("%s seq %d: %w", sess.subject, sess.head.Base, err)
			}
			sess.layout = meta.Head.Layout
		}
		prefix = sess.layout
	}
	out := append(append([]Extent(nil), prefix...), sess.head.Since...)
	if sess.own != nil {
		out = append(out, *sess.own)
	}
	return out, nil
}

// Head returns the record of key's newest version.
func (s *Store) Head(ctx context.Context, k wire.Key) (Record, error) {
	sess, err := s.session(ctx, k)
	if err != nil {
		return Record{}, err
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return headRecord(sess)
}

func headRecord(sess *session) (Record, error) {
	if sess.head.Version == 0 {
		return Record{}, fmt.Errorf("%w: %s has no version", ErrNotFound, sess.key)
	}
	if sess.lastRecord != nil {
		return *sess.lastRecord, nil
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(sess.head.State); err != nil {
		return Record{}, fmt.Errorf("%w: hash state: %v", ErrMalformed, err)
	}
	h.Write([]byte{']'})
	return Record{Version: sess.head.Version, Messages: sess.head.Messages, RawBytes: sess.head.RawBytes + 2,
		Hash: hex.EncodeToString(h.Sum(nil))}, nil
}

// Restore returns version v of key (0: the newest) as the conversation's JSON array, and its
// record. It reads the last entry of the log subject (to see whether the cached head is still
// the head: another daemon may have written), at most one entry to find an old version's record,
// then every extent it needs in one pipelined batch of direct gets. An extent gone (a merge by
// another daemon purged it) means the head moved: it starts again from the new head.
func (s *Store) Restore(ctx context.Context, k wire.Key, v uint64) ([]byte, Record, error) {
	for attempt := 0; ; attempt++ {
		conv, rec, err := s.restore(ctx, k, v)
		if errors.Is(err, ErrNotFound) && attempt < 3 {
			continue
		}
		return conv, rec, err
	}
}

func (s *Store) restore(ctx context.Context, k wire.Key, v uint64) ([]byte, Record, error) {
	sess, err := s.fresh(ctx, k)
	if err != nil {
		return nil, Record{}, err
	}
	sess.mu.Lock()
	layout, err := s.fullLayout(ctx, sess)
	var rec Record
	if err == nil {
		rec, err = headRecord(sess)
	}
	sess.mu.Unlock()
	if err != nil {
		return nil, Record{}, err
	}
	if v != 0 && v != rec.Version {
		if rec, err = s.record(ctx, k, layout, v); err != nil {
			return nil, Record{}, err
		}
	}
	var need []Extent
	var raw int64
	for _, e := range layout {
		if raw >= rec.RawBytes-2 {
			break
		}
		need = append(need, e)
		raw += e.RawBytes
	}
	seqs := make([]uint64, len(need))
	for i, e := range need {
		seqs[i] = e.Seq
	}
	bodies, err := s.getMany(ctx, seqs)
	if err != nil {
		s.forget(sess)
		return nil, Record{}, fmt.Errorf("%s version %d: %w", k, rec.Version, err)
	}
	data := make([][]byte, len(bodies))
	for i, b := range bodies {
		if _, _, data[i], err = decodeEntry(b); err != nil {
			return nil, Record{}, fmt.Errorf("%s seq %d: %w", k, seqs[i], err)
		}
	}
	joined, err := decodeExtents(need, data, raw)
	if err != nil {
		return nil, Record{}, err
	}
	conv := make([]byte, 0, rec.RawBytes)
	conv = append(append(append(conv, '['), joined[:rec.RawBytes-2]...), ']')
	if sum := sha256.Sum256(conv); hex.EncodeToString(sum[:]) != rec.Hash {
		return nil, Record{}, fmt.Errorf("%w: %s version %d does not hash to its record", ErrMalformed, k, rec.Version)
	}
	return conv, rec, nil
}

// fresh returns key's session, checked against the subject's last entry: a cached session that
// is no longer the head is dropped and read again.
func (s *Store) fresh(ctx context.Context, k wire.Key) (*session, error) {
	sess, err := s.session(ctx, k)
	if err != nil {
		return nil, err
	}
	_, seq, err := s.getLast(ctx, sess.subject)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	sess.mu.Lock()
	stale := seq != sess.lastSeq
	sess.mu.Unlock()
	if !stale {
		return sess, nil
	}
	s.forget(sess)
	return s.session(ctx, k)
}

// record finds version v's record: the extent holding v is found in the layout (by version
// range), and its entry holds the record. One direct get, whatever the number of versions.
func (s *Store) record(ctx context.Context, k wire.Key, layout []Extent, v uint64) (Record, error) {
	for _, e := range layout {
		if e.Shared || v < e.From || v > e.To {
			continue
		}
		bodies, err := s.getMany(ctx, []uint64{e.Seq})
		if err != nil {
			return Record{}, fmt.Errorf("%s version %d: %w", k, v, err)
		}
		_, meta, _, err := decodeEntry(bodies[0])
		if err != nil {
			return Record{}, fmt.Errorf("%s seq %d: %w", k, e.Seq, err)
		}
		if meta.Record != nil && meta.Record.Version == v {
			return *meta.Record, nil
		}
		if i := v - e.From; i < uint64(len(meta.Records)) && meta.Records[i].Version == v {
			return meta.Records[i], nil
		}
		return Record{}, fmt.Errorf("%w: %s seq %d lacks the record of version %d", ErrMalformed, k, e.Seq, v)
	}
	return Record{}, fmt.Errorf("%w: %s has no version %d", ErrNotFound, k, v)
}
