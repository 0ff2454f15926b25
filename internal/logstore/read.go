package logstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/wire"
)

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
	return recordOf(sess.last)
}

// Restore returns version v of key (0: the newest) as the conversation's JSON array, and its
// record. It reads the subject's last entry (whose sequence bounds the read, and tells whether
// the cache is still the head), then the subject's entries from the first to v's, in one
// batched request, decodes them and checks the SHA-256 against the version's.
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
	var rec Record
	stop := func(e entry) bool { return v != 0 && e.kind != KindLease && e.meta.Head.Version == v }
	want := 0
	if v != 0 {
		want = int(min(v, 1<<20)) + 8 // version v is entry v, after the leases before it
	}
	log, err := s.buildLog(ctx, subject, last, want, func(e entry) bool {
		if stop(e) || v == 0 && e.seq == last {
			rec, err = recordOf(e.meta)
			return true
		}
		return false
	})
	if err != nil {
		return nil, Record{}, err
	}
	if rec.Version == 0 || v != 0 && rec.Version != v {
		return nil, Record{}, fmt.Errorf("%w: %s has no version %d", ErrNoVersion, k, v)
	}
	if int64(len(log)) != rec.RawBytes-1 {
		return nil, Record{}, fmt.Errorf("%w: %s version %d: the log has %d bytes, its record says %d", ErrMalformed,
			k, rec.Version, len(log)-1, rec.RawBytes-2)
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

// ErrNoVersion is returned for a version the session does not have.
var ErrNoVersion = errors.New("logstore: no such version")

// buildLog reads subject's entries up to seq upTo (or to the first for which stop is true) and
// returns "[" followed by the log they make: a fork's source first, then the saves' pieces.
func (s *Store) buildLog(ctx context.Context, subject string, upTo uint64, want int, stop func(entry) bool) ([]byte, error) {
	entries, err := s.readLog(ctx, subject, upTo, want, stop)
	if err != nil {
		return nil, err
	}
	var lb logBuilder
	var size int64 // the log's size if nothing is rewritten: its buffer, allocated once
	for _, e := range entries {
		if e.kind == KindFork {
			size += e.meta.Fork.RawBytes
		} else if e.kind == KindSave {
			size += e.meta.Piece.RawBytes
		}
	}
	lb.out = append(make([]byte, 0, size+2), '[') // room for the "]" a restore adds
	for i, e := range entries {
		switch e.kind {
		case KindFork:
			if i != 0 {
				return nil, fmt.Errorf("%w: %s seq %d: a fork entry after the first", ErrMalformed, subject, e.seq)
			}
			src, err := s.buildLog(ctx, e.meta.Fork.Subject, e.meta.Fork.UpTo, 0, nil)
			if err != nil {
				return nil, fmt.Errorf("%s, forked from %s: %w", subject, e.meta.Fork.Subject, err)
			}
			if int64(len(src)-1) < e.meta.Fork.RawBytes {
				return nil, fmt.Errorf("%w: %s forks %d bytes of %s, which has %d", ErrMalformed, subject,
					e.meta.Fork.RawBytes, e.meta.Fork.Subject, len(src)-1)
			}
			lb.out = append(lb.out, src[1:1+e.meta.Fork.RawBytes]...)
		case KindSave:
			if err := lb.add(e.meta.Piece, e.data); err != nil {
				return nil, fmt.Errorf("%s seq %d: %w", subject, e.seq, err)
			}
		}
	}
	return lb.result()
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
	for _, e := range entries {
		if e.kind == KindLease {
			continue
		}
		rec, err := recordOf(e.meta)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}
