package logstore

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// session is what the daemon caches of one session: its last log entry (sequence and head
// state) and its compressor. A lost compare-and-swap means the cache is stale: it is dropped.
type session struct {
	mu      sync.Mutex
	key     wire.Key
	subject string
	lastSeq uint64 // 0: the subject is empty
	head    Head
	// own is the last entry's own extent when it is a save or fork (nil otherwise).
	own        *Extent
	lastRecord *Record  // the last save's record, if the last entry is a save
	layout     []Extent // the layout of head.Base, once read (nil: not read yet)
	enc        *encoder // nil: the next save starts a new frame
}

// SaveRequest appends messages (canonical JSON, validated by the caller) to a session.
type SaveRequest struct {
	Key      wire.Key
	SaveID   string
	Messages [][]byte
	// Owner and Epoch must match the session's lease while it is held.
	Owner string
	Epoch uint64
}

// Save commits one version in one publish: its record, the new head state and the new messages.
// A lost compare-and-swap (another writer, or a stale cache) re-reads the head and tries again.
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
	if r := sess.lastRecord; r != nil && r.SaveID == req.SaveID {
		return *r, nil // delivered again: answer with what was committed
	}
	if l := sess.head.Lease; l != nil && l.Expires > nowMillis() && (l.Owner != req.Owner || l.Epoch != req.Epoch) {
		return Record{}, fmt.Errorf("%w: %s held by %q epoch %d", ErrFenced, req.Key, l.Owner, l.Epoch)
	}
	piece := joinMessages(req.Messages, sess.head.Messages > 0)
	frame := sess.enc == nil
	if frame {
		enc, err := newEncoder(s.cfg.Window)
		if err != nil {
			return Record{}, err
		}
		sess.enc = enc
	}
	data, err := sess.enc.add(piece)
	if err != nil {
		sess.enc = nil
		return Record{}, err
	}
	head := sess.next()
	head.Version++
	head.Messages += len(req.Messages)
	head.RawBytes += int64(len(piece))
	var hash string
	if head.State, hash, err = extendHash(sess.head.State, piece); err != nil {
		return Record{}, err
	}
	rec := Record{Version: head.Version, SaveID: req.SaveID, Time: nowMillis(), Messages: head.Messages,
		RawBytes: head.RawBytes + 2, Hash: hash}
	own := &Extent{From: rec.Version, To: rec.Version, Messages: len(req.Messages), RawBytes: int64(len(piece)),
		Stored: len(data), Frame: frame}
	body, err := encodeEntry(KindSave, Meta{Head: &head, Record: &rec, Own: own}, data)
	if err != nil {
		return Record{}, err
	}
	seq, err := s.publish(ctx, sess.subject, body, int64(sess.lastSeq))
	if err != nil {
		sess.enc = nil // its state has the piece; the stream stored does not
		return Record{}, err
	}
	sess.commit(seq, head, own, &rec)
	return rec, nil
}

// next is the head state a new log entry starts from: the last one's, with Base and Since
// moved on past the last entry.
func (sess *session) next() Head {
	h := sess.head
	h.Layout, h.Since = nil, append([]Extent(nil), h.Since...)
	if sess.head.Layout != nil {
		h.Base, h.Since = sess.lastSeq, nil
	}
	if sess.own != nil {
		h.Since = append(h.Since, *sess.own)
	}
	return h
}

// commit records a log entry the stream acknowledged.
func (sess *session) commit(seq uint64, h Head, own *Extent, rec *Record) {
	if sess.head.Layout != nil && h.Base == sess.lastSeq {
		sess.layout = sess.head.Layout // the new entry's base is the last one
	}
	if h.Layout != nil {
		sess.layout = nil
	}
	if own != nil {
		own.Seq = seq
	}
	sess.lastSeq, sess.head, sess.own, sess.lastRecord = seq, h, own, rec
}

// joinMessages is the raw bytes a save adds: its messages joined by ",", after a "," when the
// session has messages already.
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

// extendHash continues the SHA-256 of "[" + messages with piece, and returns the new state and
// the hex hash of the conversation it ends (with "]").
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

// session returns key's cached session, reading its last entry if it is not cached.
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
		_, meta, _, err := decodeEntry(body)
		if err != nil {
			return nil, fmt.Errorf("%s seq %d: %w", subject, seq, err)
		}
		sess.lastSeq, sess.head, sess.own, sess.lastRecord = seq, *meta.Head, meta.Own, meta.Record
		if sess.own != nil {
			sess.own.Seq = seq
		}
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
