package logstore

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Record is a version record (the prototype's subset of docs/protocol.md §6), derived from the
// version's entry.
type Record struct {
	Version  uint64
	SaveID   string
	Time     int64 // unix ms
	Messages int
	RawBytes int64  // of the whole conversation, brackets included
	Hash     string // hex SHA-256 of the conversation
}

// recordOf derives a version's record from its entry's meta.
func recordOf(m Meta) (Record, error) {
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(m.Head.State); err != nil {
		return Record{}, fmt.Errorf("%w: hash state: %v", ErrMalformed, err)
	}
	h.Write([]byte{']'})
	return Record{Version: m.Head.Version, SaveID: m.SaveID, Time: m.Time, Messages: m.Head.Messages,
		RawBytes: m.Head.RawBytes + 2, Hash: hex.EncodeToString(h.Sum(nil))}, nil
}

// session is what the daemon caches of one session: its last entry (sequence and meta) and its
// compressor. A lost compare-and-swap means the cache was stale: it is dropped.
type session struct {
	mu      sync.Mutex
	key     wire.Key
	subject string
	lastSeq uint64 // 0: the subject is empty
	last    Meta   // the last entry's meta (zero if none)
	size    [2]int // bytes of the last save's entry and of its data (benchmarks)
	enc     *encoder
}

// SaveRequest adds a version to a session: its messages (canonical JSON, validated by the
// caller) appended to the head's, or, on a rewrite, to the first Keep of them.
type SaveRequest struct {
	Key      wire.Key
	SaveID   string
	Messages [][]byte
	Keep     *Kept
	// Owner and Epoch must match the session's lease while it is held.
	Owner string
	Epoch uint64
}

// Kept is what a rewrite keeps of the head: its first Messages messages, RawBytes bytes of the
// log (the daemon knows both from comparing the saved array with the head's).
type Kept struct {
	Messages int
	RawBytes int64
}

// Save commits one version with one publish: the new head state, the save id and time, and the
// new messages. A lost compare-and-swap (another writer, or a stale cache) reads the head again
// and tries again.
func (s *Store) Save(ctx context.Context, req SaveRequest) (Record, error) {
	for attempt := 0; ; attempt++ {
		sess, err := s.session(ctx, req.Key)
		if err != nil {
			return Record{}, err
		}
		rec, err := s.saveOnce(ctx, sess, req)
		if errors.Is(err, ErrConflict) && attempt < 3 {
			s.forget(sess)
			continue
		}
		return rec, err
	}
}

func (s *Store) saveOnce(ctx context.Context, sess *session, req SaveRequest) (Record, error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.lastSeq != 0 && req.SaveID != "" && sess.last.SaveID == req.SaveID {
		return recordOf(sess.last) // delivered again: answer with what was committed
	}
	if n := len(sess.last.Packed); n > 0 && req.SaveID != "" && sess.last.Packed[n-1].Record.SaveID == req.SaveID {
		return sess.last.Packed[n-1].Record, nil
	}
	if l := sess.last.Head.Lease; l != nil && l.Expires > nowMillis() && (l.Owner != req.Owner || l.Epoch != req.Epoch) {
		return Record{}, fmt.Errorf("%w: %s held by %q epoch %d", ErrFenced, req.Key, l.Owner, l.Epoch)
	}
	head, state := sess.last.Head, sess.last.Head.State
	piece := &Piece{Messages: len(req.Messages)}
	if req.Keep != nil {
		var err error
		if state, err = s.keptState(ctx, sess, req.Keep); err != nil {
			return Record{}, err
		}
		head.Messages, head.RawBytes = req.Keep.Messages, req.Keep.RawBytes
		piece.Keep = &req.Keep.RawBytes
	}
	raw := joinMessages(req.Messages, head.Messages > 0)
	piece.RawBytes, piece.CRC = int64(len(raw)), crc32.Checksum(raw, castagnoli)
	var err error
	if head.State, _, err = extendHash(state, raw); err != nil {
		return Record{}, err
	}
	head.Version++
	head.Messages += len(req.Messages)
	head.RawBytes += int64(len(raw))
	head.Pack = sess.lastPack()

	if sess.last.Packed != nil && !sess.last.Open {
		sess.enc = nil // a pack ended the frames before it (pack.go)
	}
	piece.Frame = sess.enc == nil
	if piece.Frame {
		if sess.enc, err = newEncoder(s.cfg.Window, s.cfg.FastSaves); err != nil {
			return Record{}, err
		}
	}
	data, err := sess.enc.add(raw)
	if err != nil {
		sess.enc = nil
		return Record{}, err
	}
	head.TailEntries++
	head.TailBytes += int64(len(data))
	meta := Meta{Head: head, SaveID: req.SaveID, Time: nowMillis(), Piece: piece}
	body, err := encodeEntry(KindSave, meta, data)
	if err != nil {
		return Record{}, err
	}
	seq, err := s.publish(ctx, sess.subject, body, int64(sess.lastSeq))
	if err != nil {
		sess.enc = nil // it has compressed the piece; the stored stream has not
		return Record{}, err
	}
	sess.lastSeq, sess.last, sess.size = seq, meta, [2]int{len(body), len(data)}
	return recordOf(meta)
}

// keptState is the SHA-256 state after "[" and the first kept.RawBytes bytes of the head's log:
// a rewrite reads the log (rewrites are rare; appends never read).
func (s *Store) keptState(ctx context.Context, sess *session, kept *Kept) ([]byte, error) {
	log, _, err := s.logAt(ctx, sess.subject, sess.lastSeq, 0)
	if err != nil {
		return nil, err
	}
	if kept.RawBytes < 0 || kept.RawBytes > int64(len(log)-1) || kept.Messages < 0 || kept.Messages > sess.last.Head.Messages {
		return nil, fmt.Errorf("logstore: a rewrite keeps %d messages, %d bytes of a head of %d, %d", kept.Messages,
			kept.RawBytes, sess.last.Head.Messages, len(log)-1)
	}
	state, _, err := extendHash(nil, log[1:1+kept.RawBytes])
	return state, err
}

// joinMessages is the raw bytes a save adds: its messages joined by ",", after a "," when the
// log has messages already.
func joinMessages(msgs [][]byte, continues bool) []byte {
	n := len(msgs)
	for _, m := range msgs {
		n += len(m)
	}
	out := make([]byte, 0, n)
	for i, m := range msgs {
		if i > 0 || continues {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return out
}

// extendHash continues the SHA-256 of "[" + messages with piece (state nil: from the start), and
// returns the new state and the hex hash of the conversation it ends (with "]").
func extendHash(state, piece []byte) ([]byte, string, error) {
	h := sha256.New()
	if state == nil {
		h.Write([]byte{'['})
	} else if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return nil, "", fmt.Errorf("%w: hash state: %v", ErrMalformed, err)
	}
	h.Write(piece)
	st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return nil, "", err
	}
	h.Write([]byte{']'})
	return st, hex.EncodeToString(h.Sum(nil)), nil
}

// session returns key's cached session, reading the subject's last entry if it is not cached.
func (s *Store) session(ctx context.Context, k wire.Key) (*session, error) {
	subject := LogSubject(k)
	s.mu.Lock()
	sess := s.sessions[subject]
	s.mu.Unlock()
	if sess != nil {
		return sess, nil
	}
	sess = &session{key: k, subject: subject}
	body, seq, err := s.getLast(ctx, subject)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return nil, err
	default:
		e, err := decodeAt(subject, seq, body)
		if err != nil {
			return nil, err
		}
		sess.lastSeq, sess.last = seq, e.meta
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cached := s.sessions[subject]; cached != nil {
		return cached, nil
	}
	s.sessions[subject] = sess
	return sess, nil
}

// forget drops a session from the cache (its next use reads the head again).
func (s *Store) forget(sess *session) {
	s.mu.Lock()
	if s.sessions[sess.subject] == sess {
		delete(s.sessions, sess.subject)
	}
	s.mu.Unlock()
}

// Forget drops every cached session, as a daemon restart would.
func (s *Store) Forget() {
	s.mu.Lock()
	s.sessions = map[string]*session{}
	s.mu.Unlock()
}
