package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// ErrSaveIDReused: a save whose save id already made a version of another conversation
// (*SaveIDReusedError). The save id says "this is that save again", the bytes say otherwise:
// answering with the first save's version would tell the writer that its conversation is
// stored when it is not.
var ErrSaveIDReused = errors.New("save id already used for another conversation")

// SaveIDReusedError refuses a repeat of a save id whose bytes are not those of the version the
// save id made (Version, Hash); Sent is the hash of the conversation the repeat would store, or,
// when that could not be computed (the repeat's base version was removed by retention), Detail
// says how the repeat differs.
type SaveIDReusedError struct {
	Key     Key
	SaveID  string
	Version uint64
	Hash    string
	Sent    string
	Detail  string
}

func (e *SaveIDReusedError) Error() string {
	this := "this save's conversation hashes to " + e.Sent
	if e.Sent == "" {
		this = e.Detail
	}
	return fmt.Sprintf("session %s: save id %q was already used for another conversation: version %d (%s); %s. Send it under a new save id",
		e.Key, e.SaveID, e.Version, e.Hash, this)
}

// Is makes errors.Is(err, ErrSaveIDReused) true.
func (e *SaveIDReusedError) Is(target error) bool { return target == ErrSaveIDReused }

// CheckRepeat checks req against rec, the version req's save id made (found elsewhere than by
// Save: the daemon's stored result of an earlier delivery): nil if req would store the same
// conversation; a *SaveIDReusedError if not; req's validation error if req is not a valid save.
// Where it cannot be told for certain (an append whose base version retention removed), the
// string says why (Saved.Unverified).
func (e *Engine) CheckRepeat(ctx context.Context, req SaveRequest, rec Record) (string, error) {
	if err := checkRequest(&req); err != nil {
		return "", err
	}
	s := e.session(req.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := e.load(ctx, s); err != nil {
		return "", err
	}
	return e.checkRepeat(ctx, s, req, rec)
}

// checkRepeat is CheckRepeat on a loaded session (s.mu held). A repeat is the same save when the
// conversation it would store hashes as rec's: a whole array, canonical or not, once parsed; an
// append, its messages after those of its base version (read for it, unless the base is the
// head or nothing). Only a repeat pays for this, never a new save.
func (e *Engine) checkRepeat(ctx context.Context, s *session, req SaveRequest, rec Record) (string, error) {
	if req.Import != nil {
		return "", nil // an import is its version only with its number and hash (saveOnce)
	}
	if req.Base != nil && *req.Base != rec.Parent {
		// An append is made onto its base, the head then (Parent): a repeat onto another base
		// is another save, told without reading anything.
		return "", &SaveIDReusedError{Key: req.Key, SaveID: req.SaveID, Version: rec.Version, Hash: rec.Hash,
			Detail: fmt.Sprintf("that version was saved onto version %d, this save appends to version %d", rec.Parent, *req.Base)}
	}
	sent, known, err := e.repeatHash(ctx, s, req, rec)
	switch {
	case err != nil:
		return "", err
	case !known:
		return e.checkRepeatWithoutBase(ctx, s, req, rec)
	case sent == rec.Hash:
		return "", nil
	}
	return "", &SaveIDReusedError{Key: req.Key, SaveID: req.SaveID, Version: rec.Version, Hash: rec.Hash, Sent: sent}
}

// checkRepeatWithoutBase checks an append's repeat whose base version retention removed, so that
// the conversation it would store cannot be hashed. What can still be told is told: the save id's
// version was made on another version than this repeat's base (an append is made on its base,
// the head then: Parent), or does not end with the messages this repeat appends; either is
// another save (save_id_reused). Otherwise the repeat is taken for the save, and the string says
// that it was not compared whole: its base's messages were not read.
func (e *Engine) checkRepeatWithoutBase(ctx context.Context, s *session, req SaveRequest, rec Record) (string, error) {
	base := *req.Base // rec.Parent (checkRepeat)
	refuse := func(detail string) (string, error) {
		return "", &SaveIDReusedError{Key: req.Key, SaveID: req.SaveID, Version: rec.Version, Hash: rec.Hash, Detail: detail}
	}
	lim := req.Limits
	lim.Continues = true // the base is no longer there to say; a version an append extends has messages as a rule
	c, err := codec.ParseLimited(req.Payload, lim)
	if err != nil {
		return "", err
	}
	tail := c.Span(0, len(c.Messages))
	if req.Memory != nil {
		n := readBytes(rec)
		if err := reserveForRepeat(req.Memory, n); err != nil {
			return "", err
		}
		defer req.Memory.Release(n)
	}
	entries, err := e.entriesHolding(ctx, s.key, s.lastDeleted(), s.lastSeq, rec.Version)
	if err != nil {
		return "", err
	}
	// A version whose own entry still holds what its save stored (not packed, not a rewrite) says
	// how many messages that save appended onto its parent.
	if p := savePiece(entries[len(entries)-1].meta, rec.Version); p != nil && p.Keep == nil && p.Messages != len(c.Messages) {
		return refuse(fmt.Sprintf("that version's save appended %d messages, this save appends %d", p.Messages, len(c.Messages)))
	}
	log, _, err := e.logOf(ctx, s.key, entries, rec.Version, 0)
	if err != nil {
		return "", err
	}
	msgs := log[1:] // "[" and the messages
	if !bytes.Equal(msgs, tail) && !bytes.HasSuffix(msgs, append([]byte{','}, tail...)) {
		return refuse(fmt.Sprintf("that version does not end with the %d messages this save appends", len(c.Messages)))
	}
	return fmt.Sprintf("version %d, the base this save appends to, was removed by retention: the save was taken for the one that made version %d (saved onto version %d and ending with these messages) without comparing the whole conversation", base, rec.Version, base), nil
}

// repeatHash is the hash of the conversation req would store, computed as Save's plan would
// (the same parse, the same limits), and whether it could be told. want is the hash of the
// version the save id made: a whole array sent in canonical form (as the SDKs send it) is
// recognised by hashing it, without a parse.
func (e *Engine) repeatHash(ctx context.Context, s *session, req SaveRequest, rec Record) (string, bool, error) {
	want := rec.Hash
	if req.Base == nil {
		sum := sha256.Sum256(req.Payload)
		if h := "sha256:" + hex.EncodeToString(sum[:]); h == want {
			return h, true, nil
		}
		c, err := codec.ParseLimited(req.Payload, req.Limits)
		if err != nil {
			return "", false, err
		}
		state, err := extendHash(nil, c.Span(0, len(c.Messages)))
		if err != nil {
			return "", false, err
		}
		h, err := finish(state)
		return h, err == nil, err
	}
	state, messages, known, err := e.stateAt(ctx, s, *req.Base, req.Memory, readBytes(rec))
	if err != nil || !known {
		return "", false, err
	}
	lim := req.Limits
	lim.Continues = messages
	c, err := codec.ParseLimited(req.Payload, lim)
	if err != nil {
		return "", false, err
	}
	tail := c.Span(0, len(c.Messages))
	if messages && len(tail) > 0 {
		tail = append([]byte{','}, tail...)
	}
	if state, err = extendHash(state, tail); err != nil {
		return "", false, err
	}
	h, err := finish(state)
	return h, err == nil, err
}

// stateAt returns the SHA-256 state after "[" and version v's messages (nil: v is 0, nothing
// hashed yet), whether v has messages, and whether v could be read at all (not if retention
// removed it). Reading a version other than the head costs its whole conversation: mem (nil: no
// one) is told of it before it is read (baseRead).
func (e *Engine) stateAt(ctx context.Context, s *session, v uint64, mem codec.Growth, size int64) ([]byte, bool, bool, error) {
	h := s.last.Head
	switch {
	case v == 0:
		return nil, false, true, nil
	case v == h.Version:
		return h.State, h.Counts.Messages > 0, true, nil
	case v < max(h.FirstVersion, 1):
		return nil, false, false, nil // removed by retention (its bytes may linger until a pack)
	}
	r := baseRead{mem: mem}
	defer r.release()
	log, err := r.log(ctx, e, s, v, size)
	if errors.Is(err, ErrNotFound) {
		return nil, false, false, nil
	}
	if err != nil {
		return nil, false, false, err
	}
	state, err := extendHash(nil, log[1:])
	return state, len(log) > 1, err == nil, err
}

// baseRead reads a repeat's base version within its caller's memory budget (mem; nil: no one),
// reserving by what the read holds: readBytes of the base's own record. That is not the record
// of the version the repeat's save id made (which the caller's size comes from): a base is
// smaller than the version an append made onto it, but a whole-array save can rewrite its parent
// shorter, and a repeat may name that parent as its base. So the base's size is reserved before
// anything is read when the session's recent records know it (the usual case: the parent of a
// version among them, docs/protocol.md §4.3), and otherwise the caller's size is, topped up to the
// base's own once its entries are read, before its conversation is built (the larger part).
type baseRead struct {
	mem  codec.Growth
	held int64
}

// log returns "[" and version v's messages, reserving before each part of the read.
func (r *baseRead) log(ctx context.Context, e *Engine, s *session, v uint64, size int64) ([]byte, error) {
	if rec, ok := s.recent.version(v); ok {
		size = max(size, readBytes(rec))
	}
	if err := r.reserve(size); err != nil {
		return nil, err
	}
	entries, err := e.entriesHolding(ctx, s.key, s.lastDeleted(), s.lastSeq, v)
	if err != nil {
		return nil, err
	}
	rec, _, err := recordIn(s.key, entries[len(entries)-1], v)
	if err != nil {
		return nil, err
	}
	if err := r.reserve(readBytes(rec)); err != nil {
		return nil, err
	}
	log, _, err := e.logOf(ctx, s.key, entries, v, 0)
	return log, err
}

// reserve makes the bytes reserved at least n, without waiting (the session is locked).
func (r *baseRead) reserve(n int64) error {
	if r.mem == nil || n <= r.held {
		return nil
	}
	if err := reserveForRepeat(r.mem, n-r.held); err != nil {
		return err
	}
	r.held = n
	return nil
}

// release gives back what the read reserved.
func (r *baseRead) release() {
	if r.mem != nil && r.held > 0 {
		r.mem.Release(r.held)
	}
}

// readBytes bounds what reading rec's conversation holds at once: the log built (its canonical
// bytes) and the entries it is built from (compressed, so at most about as many again).
func readBytes(rec Record) int64 { return 2*rec.RawBytes + 64<<10 }

// errNoRoom marks a repeat refused because its caller's memory budget had no room for the read of
// its base (SaveRequest.Memory): the session is as cached, so the refusal keeps the cache (again).
var errNoRoom = errors.New("engine: no room in the memory budget to read a repeat's base")

// reserveForRepeat reserves n bytes of mem for a repeat's read; a refusal is returned as mem gave
// it (the caller's own error, which the edge answers), marked errNoRoom.
func reserveForRepeat(mem codec.Growth, n int64) error {
	if err := mem.Reserve(n); err != nil {
		return fmt.Errorf("%w: %w", errNoRoom, err)
	}
	return nil
}
