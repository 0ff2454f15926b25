package logstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// ErrNoVersion is returned for a version the session does not have.
var ErrNoVersion = errors.New("logstore: no such version")

// Head returns the record of key's newest version (from the cache, or one direct get).
func (s *Store) Head(ctx context.Context, k wire.Key) (Record, error) {
	sess, err := s.session(ctx, k)
	if err != nil {
		return Record{}, err
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.last.Head.Version == 0 {
		return Record{}, fmt.Errorf("%w: %s has no version", ErrNotFound, k)
	}
	return headRecord(entry{seq: sess.lastSeq, meta: sess.last, kind: kindOf(sess.last)})
}

func kindOf(m Meta) Kind {
	switch {
	case m.Packed != nil:
		return KindPack
	case m.Fork != nil:
		return KindFork
	case m.Piece != nil:
		return KindSave
	}
	return KindLease
}

// headRecord is the record of the version an entry leaves as the head.
func headRecord(e entry) (Record, error) {
	if e.kind == KindPack {
		return e.meta.Packed[len(e.meta.Packed)-1].Record, nil
	}
	return recordOf(e.meta)
}

// holds returns whether an entry holds version v.
func holds(v uint64) func(entry) bool {
	return func(e entry) bool {
		switch e.kind {
		case KindSave, KindFork:
			return e.meta.Head.Version == v
		case KindPack:
			return e.meta.Packed[0].Record.Version <= v && v <= e.meta.Packed[len(e.meta.Packed)-1].Record.Version
		}
		return false
	}
}

// packedRecord returns version v's record in a pack, and its index.
func packedRecord(e entry, v uint64) (Record, int) {
	i := int(v - e.meta.Packed[0].Record.Version)
	return e.meta.Packed[i].Record, i
}

// Restore returns version v of key (0: the newest) as the conversation's JSON array, and its
// record. It reads the subject's last entry (whose sequence bounds the read), then the
// subject's entries from the first to v's in one batched request, decodes them and checks the
// SHA-256 against the version's.
func (s *Store) Restore(ctx context.Context, k wire.Key, v uint64) ([]byte, Record, error) {
	for attempt := 0; ; attempt++ {
		conv, rec, err := s.restore(ctx, k, v)
		if errors.Is(err, ErrNotFound) && attempt < 3 {
			continue // the head moved under the read (or a replica lags): read it again
		}
		return conv, rec, err
	}
}

func (s *Store) restore(ctx context.Context, k wire.Key, v uint64) ([]byte, Record, error) {
	subject := LogSubject(k)
	_, last, err := s.getLast(ctx, subject)
	if err != nil {
		return nil, Record{}, fmt.Errorf("%s: %w", k, err)
	}
	log, rec, err := s.logAt(ctx, subject, last, v)
	if err != nil {
		return nil, Record{}, err
	}
	conv := append(log, ']')
	if s.cfg.NoVerify {
		return conv, rec, nil
	}
	if sum := sha256.Sum256(conv); hex.EncodeToString(sum[:]) != rec.Hash {
		return nil, Record{}, fmt.Errorf("%w: %s version %d does not hash to its record", ErrMalformed, k, rec.Version)
	}
	return conv, rec, nil
}

// logAt reads subject's entries up to sequence upTo and returns "[" followed by the log of
// version v (0: the last entry's), and v's record.
func (s *Store) logAt(ctx context.Context, subject string, upTo, v uint64) ([]byte, Record, error) {
	want, stop := 0, func(entry) bool { return false }
	if v != 0 {
		want, stop = int(min(v, 1<<20))+8, holds(v) // version v is at most entry v (+ leases)
	}
	entries, err := s.readLog(ctx, subject, upTo, want, stop)
	if err != nil {
		return nil, Record{}, err
	}
	entries = live(entries)
	target := entries[len(entries)-1]
	if v != 0 && !holds(v)(target) {
		return nil, Record{}, fmt.Errorf("%w: %s has no version %d", ErrNoVersion, subject, v)
	}
	rec, err := headRecord(target)
	if target.kind == KindPack && v != 0 {
		rec, _ = packedRecord(target, v)
	}
	if err != nil {
		return nil, Record{}, err
	}
	lb := logBuilder{out: append(make([]byte, 0, rec.RawBytes+64), '[')} // room for "]", and for the decoder
	for i, e := range entries {
		switch e.kind {
		case KindFork:
			if i != 0 {
				return nil, Record{}, fmt.Errorf("%w: %s seq %d: a fork entry after the first", ErrMalformed, subject, e.seq)
			}
			src, _, err := s.logAt(ctx, e.meta.Fork.Subject, e.meta.Fork.UpTo, e.meta.Fork.Version)
			if err != nil {
				return nil, Record{}, fmt.Errorf("%s, forked from %s: %w", subject, e.meta.Fork.Subject, err)
			}
			if int64(len(src)-1) != e.meta.Fork.RawBytes {
				return nil, Record{}, fmt.Errorf("%w: %s forks %d bytes of %s, which has %d", ErrMalformed, subject,
					e.meta.Fork.RawBytes, e.meta.Fork.Subject, len(src)-1)
			}
			lb.out = append(lb.out, src[1:]...)
		case KindSave:
			err = lb.add(e.meta.Piece, e.data)
		case KindPack:
			packed := e.meta.Packed
			if i == len(entries)-1 && v != 0 {
				_, n := packedRecord(e, v)
				packed, lb.partial = packed[:n+1], n+1 < len(packed)
			}
			err = lb.addPack(packed, e.data, e.meta.Open)
		}
		if err != nil {
			return nil, Record{}, fmt.Errorf("%s seq %d: %w", subject, e.seq, err)
		}
	}
	log, err := lb.result()
	if err == nil && int64(len(log)+1) != rec.RawBytes {
		err = fmt.Errorf("%w: %s version %d: the log has %d bytes, its record says %d", ErrMalformed,
			subject, rec.Version, len(log)-1, rec.RawBytes-2)
	}
	return log, rec, err
}

// live drops the entries a later pack covers (left by a crash between a pack and its deletes):
// a pack covers the saves and leases after the pack before it.
func live(entries []entry) []entry {
	var out []entry
	for _, e := range entries {
		if e.kind == KindPack {
			for len(out) > 0 && out[len(out)-1].kind != KindPack && out[len(out)-1].kind != KindFork &&
				out[len(out)-1].seq > e.meta.Head.Pack {
				out = out[:len(out)-1]
			}
		}
		out = append(out, e)
	}
	return out
}

// History returns the records of key's versions, oldest first (one batched read of the subject).
func (s *Store) History(ctx context.Context, k wire.Key) ([]Record, error) {
	subject := LogSubject(k)
	_, last, err := s.getLast(ctx, subject)
	if err != nil {
		return nil, err
	}
	entries, err := s.readLog(ctx, subject, last, 0, nil)
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, e := range live(entries) {
		switch e.kind {
		case KindPack:
			for _, p := range e.meta.Packed {
				out = append(out, p.Record)
			}
		case KindSave, KindFork:
			rec, err := recordOf(e.meta)
			if err != nil {
				return nil, err
			}
			out = append(out, rec)
		}
	}
	return out, nil
}
