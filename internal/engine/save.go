package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"time"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// SaveRequest is one save. Payload is a JSON array: the whole conversation, or, with Base set,
// only the messages appended to version *Base (which must be the head). The engine validates it
// (codec.ParseLimited with Limits) and stores its canonical form.
type SaveRequest struct {
	Key      Key
	SaveID   string  // idempotency key: a save id the session has already saved is not stored again (other content: ErrSaveIDReused)
	Expected *uint64 // when set, the head must be this version (0: the session must not exist)
	Base     *uint64 // when set, Payload holds only the messages appended to this version
	Writer   string
	Reason   string   // default ReasonTurn
	ForkOf   *ForkRef // recorded on the version: the session was forked from there
	Epoch    uint64   // the writer's lease epoch; 0: the writer holds no lease
	Import   *Import  // set when copying a version from elsewhere (migrate, import)
	Payload  []byte
	Limits   codec.Limits
	Now      time.Time
	// Memory, when set, is told of the storage a save reads for it beyond its own payload, before
	// it is read: the messages of an append's base version that a repeat of its save id is compared
	// against (repeat.go). The daemon passes the save's share of its ingest budget, so a flood of
	// small repeats cannot make it hold many conversations at once; an error it returns (busy) is
	// returned as it is.
	Memory codec.Growth
}

// Import copies a version as it was elsewhere: its number (above the head's), creation time and
// hash, which the stored conversation must match. Importing a version that is already here with
// the same hash is a duplicate; with another hash, a conflict.
type Import struct {
	Version uint64
	Created time.Time
	Hash    string
	Origin  Origin
}

// Saved is the outcome of Save.
type Saved struct {
	Record    Record
	Duplicate bool // the save id was saved before (or the import is here): nothing was written
	// Unverified, on a duplicate, says why the save could not be compared whole with the version
	// its save id made (checkRepeatWithoutBase); "" when it was.
	Unverified string
	// PackDue says the session's entries since its last pack are due to be packed: the caller
	// runs Pack after answering the save, off its latency.
	PackDue bool
}

// maxSwapAttempts bounds the retries when other writers keep moving the head; each retry means
// another entry was committed, so the session is making progress.
const maxSwapAttempts = 64

// Save makes req the next version of its session: one entry appended with a compare-and-swap on
// the session's last entry (docs/format.md §8.5), holding the new head, the version's record and
// only the messages the head lacks. A lost compare-and-swap (another writer, or a stale cache)
// reads the head again and decides again.
func (e *Engine) Save(ctx context.Context, req SaveRequest) (Saved, error) {
	if e.invalid != nil {
		return Saved{}, e.invalid
	}
	if err := checkRequest(&req); err != nil {
		return Saved{}, err
	}
	for attempt := 0; attempt < maxSwapAttempts; attempt++ {
		s := e.session(req.Key)
		saved, err := e.saveOnce(ctx, s, req, attempt == 0)
		if e.again(ctx, s, err) {
			continue
		}
		return saved, err
	}
	return Saved{}, fmt.Errorf("%w: session %s: head kept moving after %d attempts", ErrBusy, req.Key, maxSwapAttempts)
}

// checkRequest refuses a request that contradicts itself, before any read.
func checkRequest(req *SaveRequest) error {
	if req.Base != nil {
		if req.Expected != nil && *req.Expected != *req.Base {
			return fmt.Errorf("%w: expected version %d and base version %d disagree", ErrBadRequest, *req.Expected, *req.Base)
		}
		req.Expected = req.Base
	}
	if req.Limits.Dialect == codec.DialectNative {
		req.Limits.Dialect = "" // recorded as nothing, so native records stay as they were
	}
	if err := codec.CheckDialect(req.Limits.Dialect); err != nil {
		return err
	}
	if req.Limits.MaxBytes > 0 && int64(len(req.Payload)) > req.Limits.MaxBytes {
		return &codec.ValidationError{Err: codec.ErrTooLarge, Index: -1, Offset: -1,
			Detail: fmt.Sprintf("%d bytes, the limit is %d", len(req.Payload), req.Limits.MaxBytes)}
	}
	if req.Reason == "" {
		req.Reason = ReasonTurn
	}
	if imp := req.Import; imp != nil && (imp.Version < 1 || imp.Version > MaxVersion) {
		return fmt.Errorf("%w: import of version %d: versions are 1..%d", ErrBadRequest, imp.Version, MaxVersion)
	}
	return nil
}

// saveOnce is one attempt of Save. optimistic allows it to take a session it has not loaded for
// empty when the save creates it (Save's first attempt only: the next ones read the head).
func (e *Engine) saveOnce(ctx context.Context, s *session, req SaveRequest, optimistic bool) (saved Saved, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cached := s.loaded
	if optimistic && !cached && req.Expected != nil && *req.Expected == 0 {
		// A save that creates its session: its compare-and-swap on an empty log says whether the
		// log is empty, so the head is not read first (one round trip less). Anything but success
		// (a log that was not empty loses the compare-and-swap, or a refusal made from the assumed
		// head) leaves the session unloaded, and Save's next attempt reads it.
		//
		// The log's creation begins now: on JetStream, its listing (the namespace's index entry)
		// travels while the save is validated and compressed (docs/format.md §8.15j). A save that
		// ends without appending abandons it, so that a refused first save lists nothing.
		s.assumeEmpty()
		s.creation = Create(ctx, e.log, req.Key)
		defer func() {
			err = s.endCreation(ctx, err)
			if err != nil {
				s.unload()
			}
		}()
	} else if err := e.load(ctx, s); err != nil {
		return Saved{}, err
	}
	h := s.last.Head
	found := h.Version > 0
	if req.SaveID != "" {
		rec, ok, err := e.savedBefore(ctx, s, req.SaveID)
		if err != nil {
			return Saved{}, err
		}
		if ok && cached {
			// A duplicate found in the cache must still be the log's: another daemon may have
			// deleted the session since (a conflict: the caller reads the log again).
			if err := e.checkCached(ctx, s); err != nil {
				return Saved{}, err
			}
		}
		// An import is the same as a version stored only if it has its number and hash too
		// (a source may reuse a save id); otherwise the import rules below answer.
		if ok && (req.Import == nil || rec.Version == req.Import.Version && rec.Hash == req.Import.Hash) {
			// The same save id with another conversation is not this save again: refused, or
			// the writer would believe its conversation stored (docs/protocol.md §4.3).
			unverified, err := e.checkRepeat(ctx, s, req, rec)
			if err != nil {
				return Saved{}, err
			}
			return Saved{Record: rec, Duplicate: true, Unverified: unverified}, nil
		}
	}
	// Only a migration brings a moved session back; an import of a bundle does not.
	comingBack := req.Import != nil && req.Import.Origin.Via == ReasonMigrate
	if req.Import != nil && req.Import.Version <= h.Version {
		return e.importedBefore(ctx, s, *req.Import, comingBack)
	}
	if err := checkWrite(h, req.Key, req.Epoch, comingBack, req.Now); err != nil {
		return Saved{}, err
	}
	if err := checkNumber(req.Key, h, found, req.Import); err != nil {
		return Saved{}, err
	}
	if err := checkDialect(req.Key, h, found, req.Limits.Dialect); err != nil {
		return Saved{}, err
	}
	if req.Expected != nil && *req.Expected != h.Version {
		// A save retried after its outcome was lost finds the head moved on by its own version
		// and later ones: that is a duplicate, not a conflict.
		if rec, ok := e.savedAfter(ctx, s, *req.Expected, req.SaveID); ok {
			unverified, err := e.checkRepeat(ctx, s, req, rec)
			if err != nil {
				return Saved{}, err
			}
			return Saved{Record: rec, Duplicate: true, Unverified: unverified}, nil
		}
		return Saved{}, &ConflictError{Key: req.Key, Expected: *req.Expected, Head: h.Version}
	}
	ahead := e.compressAhead(s, req) // while plan validates the payload
	p, err := e.plan(ctx, s, req)
	if err != nil {
		ahead.abandon(s)
		return Saved{}, err
	}
	return e.commit(ctx, s, req, p, ahead)
}

// savedBefore finds the version save id made among the head, the last pack and the saves after
// it (the session's recent records, read once per load).
func (e *Engine) savedBefore(ctx context.Context, s *session, saveID string) (Record, bool, error) {
	h := s.last.Head
	if h.Version > 0 && h.SaveID == saveID {
		rec, err := recordOf(s.key, h)
		return rec, true, err
	}
	if !s.recent.ok {
		if s.lastSeq == 0 {
			s.recent.reset(true)
		} else {
			recs, _, _, err := e.tailRecords(ctx, s.key, ent{seq: s.lastSeq, meta: s.last})
			if err != nil {
				return Record{}, false, err
			}
			s.recent.set(recs)
		}
	}
	rec, ok := s.recent.find(saveID, max(h.FirstVersion, 1), h.Version)
	return rec, ok, nil
}

// maxDuplicateScan bounds how many versions after the expected one are searched for a save id.
const maxDuplicateScan = 256

// savedAfter finds the version save id made among the few after version after (a retry whose
// first delivery was committed, after which the session moved on).
func (e *Engine) savedAfter(ctx context.Context, s *session, after uint64, saveID string) (Record, bool) {
	h := s.last.Head
	if saveID == "" || after >= h.Version || h.Version-after > maxDuplicateScan {
		return Record{}, false
	}
	var found *Record
	_ = e.walkBack(ctx, s.key, ent{seq: s.lastSeq, meta: s.last}, int(h.Version-after), func(r Record) bool {
		if r.SaveID == saveID {
			found = &r
			return false
		}
		return r.Version > after+1
	})
	if found == nil || found.Version <= after {
		return Record{}, false
	}
	return *found, true
}

// importedBefore settles an import of a version the session already has: a duplicate if it is
// the same conversation, a conflict if not; a migration back with nothing new unseals.
func (e *Engine) importedBefore(ctx context.Context, s *session, imp Import, comingBack bool) (Saved, error) {
	h := s.last.Head
	rec, err := e.Version(ctx, s.key, imp.Version)
	if errors.Is(err, ErrNotFound) {
		return Saved{}, &ConflictError{Key: s.key, Expected: imp.Version - 1, Head: h.Version,
			Detail: fmt.Sprintf("cannot import version %d: the session is already at version %d and does not keep %d", imp.Version, h.Version, imp.Version)}
	}
	if err != nil {
		return Saved{}, err
	}
	if rec.Hash != imp.Hash {
		return Saved{}, &ConflictError{Key: s.key, Expected: imp.Version - 1, Head: h.Version,
			Detail: fmt.Sprintf("cannot import version %d: this session has a different version %d (%s, importing %s)", imp.Version, imp.Version, rec.Hash, imp.Hash)}
	}
	if comingBack && h.Moved != nil && imp.Version == h.Version {
		// Migrated back with nothing new to copy: the session is here again all the same.
		next := h
		next.Moved = nil
		if err := e.writeState(ctx, s, next); err != nil {
			return Saved{}, err
		}
	}
	return Saved{Record: rec, Duplicate: true}, nil
}

// checkNumber refuses a save whose version number would leave 1..MaxVersion, and an import that
// does not continue the session's own line: on a session with versions, an import is the head's
// next version; only an empty session may start anywhere (a copy of a pruned source).
func checkNumber(key Key, h headState, found bool, imp *Import) error {
	switch {
	case imp != nil && (imp.Version < 1 || imp.Version > MaxVersion):
		return fmt.Errorf("%w: import of version %d: versions are 1..%d", ErrBadRequest, imp.Version, MaxVersion)
	case imp != nil && found && imp.Version != h.Version+1:
		return &ConflictError{Key: key, Expected: imp.Version - 1, Head: h.Version,
			Detail: fmt.Sprintf("cannot import version %d: the head is version %d, and an import continues a session at its next version (%d)", imp.Version, h.Version, h.Version+1)}
	case imp == nil && h.Version >= MaxVersion:
		return fmt.Errorf("%w: session %s is at version %d, the largest there is", ErrVersionLimit, key, h.Version)
	}
	return nil
}

// checkDialect refuses a save whose dialect (normalised: "" is native) is not the session's: a
// session holds one shape of conversation.
func checkDialect(key Key, h headState, found bool, dialect string) error {
	if !found || h.Dialect == dialect {
		return nil
	}
	name := func(d string) string {
		if d == "" {
			return codec.DialectNative
		}
		return d
	}
	return fmt.Errorf("%w: session %s holds %s conversations and this save is %s; save it as %s, or into a new session (a session keeps one dialect)",
		ErrDialectMismatch, key, name(h.Dialect), name(dialect), name(h.Dialect))
}

// savePlan is what a save adds: keep the first keep messages (keepBytes bytes) of the head's log,
// then tail (its messages joined by ",").
type savePlan struct {
	rewrite   bool // keep < the head's messages
	keep      int
	keepBytes int64
	keepState []byte // SHA-256 state after "[" and the kept bytes (rewrites)
	tail      []byte
	messages  int
	counts    Counts // of the whole new conversation
	// large is where tail's strings of ValueMinBytes or more are, as the parse noted them
	// (codec.Conversation.LargeStrings): storeValues need not read the tail again to find them.
	large [][2]int
}

// newBytes returns the plan's new bytes as its piece stores them: tail, after a comma when it follows
// kept messages.
func (p savePlan) newBytes() []byte {
	if p.keep > 0 && p.messages > 0 {
		return append([]byte{','}, p.tail...)
	}
	return p.tail
}

// largeStrings returns where the strings of raw, the plan's new bytes (p.newBytes()), of
// ValueMinBytes or more are.
func (p savePlan) largeStrings(raw []byte) [][2]int {
	comma := len(raw) - len(p.tail)
	if comma != 0 && comma != 1 {
		return codec.LargeStrings(raw, ValueMinBytes) // not the plan's bytes: read them
	}
	if len(p.large) == 0 {
		return nil
	}
	out := make([][2]int, len(p.large)) // a copy: valueSpans filters it in place
	for i, sp := range p.large {
		out[i] = [2]int{sp[0] + comma, sp[1] + comma}
	}
	return out
}

// plan works out what a save adds to the head. The common cases cost only the new messages: a
// client that sends what it appended (Base), and a client that resends its whole array in
// canonical form (recognised by hashing the prefix the head already has). Otherwise the head is
// read and compared message by message: what is the same is kept (docs/format.md §8.10).
func (e *Engine) plan(ctx context.Context, s *session, req SaveRequest) (savePlan, error) {
	return e.planFrom(ctx, s, s.last.Head, req)
}

// planFrom is plan against head h: the session's, or, in a group (group.go), the head the saves
// before it in the group make, which is not stored yet (the group then never plans a save that
// needs the head's messages read: planReads).
func (e *Engine) planFrom(ctx context.Context, s *session, h headState, req SaveRequest) (savePlan, error) {
	headMsgs := h.Counts.Messages
	req.Limits.LargeStrings = ValueMinBytes // for storeValues, found by the parse
	tailLimits := req.Limits
	tailLimits.Continues = headMsgs > 0 // an append's first message is not the conversation's
	appendOf := func(c *codec.Conversation) (savePlan, error) {
		p := savePlan{keep: headMsgs, keepBytes: h.RawBytes, tail: c.Span(0, len(c.Messages)), messages: len(c.Messages),
			counts: addCounts(h.Counts, c.Stats()), large: c.LargeStrings(0, len(c.Messages), ValueMinBytes)}
		return p, checkGrowth(h, p, req.Limits)
	}
	if req.Base != nil {
		c, err := codec.ParseLimited(req.Payload, tailLimits)
		if err != nil {
			return savePlan{}, shift(err, headMsgs, 0)
		}
		return appendOf(c)
	}
	if headMsgs > 0 {
		if tail, ok := canonicalTail(h, req.Payload); ok {
			c, err := codec.ParseLimited(tail, tailLimits)
			if err != nil {
				return savePlan{}, shift(err, headMsgs, h.RawBytes+1)
			}
			return appendOf(c)
		}
	}
	c, err := codec.ParseLimited(req.Payload, req.Limits)
	if err != nil {
		return savePlan{}, err
	}
	if headMsgs == 0 {
		return savePlan{tail: c.Span(0, len(c.Messages)), messages: len(c.Messages), counts: toCounts(c.Stats()),
			large: c.LargeStrings(0, len(c.Messages), ValueMinBytes)}, nil
	}
	log, _, err := e.logAt(ctx, s.key, s.lastDeleted(), s.lastSeq, h.Version)
	if err != nil {
		return savePlan{}, err
	}
	old := codec.SplitCanonical(log[1:])
	keep, keepBytes := 0, int64(0)
	for keep < len(old) && keep < len(c.Messages) && bytes.Equal(old[keep], c.Messages[keep]) {
		keepBytes += int64(len(old[keep]))
		keep++
	}
	if keep > 1 {
		keepBytes += int64(keep - 1) // the commas between them
	}
	p := savePlan{keep: keep, keepBytes: keepBytes, tail: c.Span(keep, len(c.Messages)), messages: len(c.Messages) - keep,
		counts: toCounts(c.Stats()), large: c.LargeStrings(keep, len(c.Messages), ValueMinBytes)}
	if p.rewrite = keep < headMsgs; p.rewrite {
		if p.keepState, err = extendHash(nil, log[1:1+keepBytes]); err != nil {
			return savePlan{}, err
		}
	}
	return p, nil
}

// canonicalTail recognises payload as the head's canonical bytes plus more messages, hashing only
// the shared prefix, and returns the new messages as a JSON array.
func canonicalTail(h headState, payload []byte) ([]byte, bool) {
	n := h.RawBytes + 1 // "[" and the head's messages
	if int64(len(payload)) <= n+1 || payload[n] != ',' {
		return nil, false
	}
	st := sha256.New()
	if st.(encoding.BinaryUnmarshaler).UnmarshalBinary(h.State) != nil {
		return nil, false
	}
	sum := sha256.Sum256(payload[:n])
	if !bytes.Equal(sum[:], st.Sum(nil)) {
		return nil, false
	}
	tail := make([]byte, 0, int64(len(payload))-n)
	tail = append(tail, '[')
	return append(tail, payload[n+1:]...), true
}

// checkGrowth refuses an append that would take the conversation past the size limit.
func checkGrowth(h headState, p savePlan, lim codec.Limits) error {
	size := h.RawBytes + 2 + int64(len(p.tail))
	if h.Counts.Messages > 0 && p.messages > 0 {
		size++
	}
	if lim.MaxBytes > 0 && size > lim.MaxBytes {
		return &codec.ValidationError{Err: codec.ErrTooLarge, Index: -1, Offset: -1,
			Detail: fmt.Sprintf("the conversation would grow to %d bytes, the limit is %d", size, lim.MaxBytes)}
	}
	return nil
}

// shift renumbers a validation error in the appended messages to the whole conversation.
func shift(err error, messages int, offset int64) error {
	var ve *codec.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	c := *ve
	if c.Index >= 0 {
		c.Index += messages
	}
	if c.Offset >= 0 {
		c.Offset += offset
	}
	return &c
}

func toCounts(s codec.Stats) Counts {
	return Counts{Messages: s.Messages, User: s.User, Assistant: s.Assistant, ToolResult: s.ToolResult, Extension: s.Extension,
		ToolCalls: s.ToolCalls, System: s.System}
}

func addCounts(c Counts, s codec.Stats) Counts {
	t := toCounts(s)
	return Counts{Messages: c.Messages + t.Messages, User: c.User + t.User, Assistant: c.Assistant + t.Assistant,
		ToolResult: c.ToolResult + t.ToolResult, Extension: c.Extension + t.Extension, ToolCalls: c.ToolCalls + t.ToolCalls,
		System: c.System + t.System}
}

// commit compresses the plan's new messages, builds the entry and appends it. A large save's
// compression starts first, beside the head's hash (nextHead: another pass over the same bytes),
// unless it started before the plan (ahead, compressAhead) and compressed these very bytes.
func (e *Engine) commit(ctx context.Context, s *session, req SaveRequest, p savePlan, ahead *compression) (Saved, error) {
	raw := p.newBytes()
	early := e.compressBeside(s, p, raw, ahead)
	next, err := nextHead(s, req, p, raw)
	if err != nil {
		early.abandon(s)
		return Saved{}, err
	}
	return e.commitHead(ctx, s, next, p, raw, early)
}

// commitHead writes the save entry of head next, whose new bytes are raw (values included): it
// stores raw's large values, compresses the rest (unless early already does: raw, which then has no
// values to store) and appends the entry with a compare-and-swap. Save and CopyVersion differ only
// in how they make next.
func (e *Engine) commitHead(ctx context.Context, s *session, next headState, p savePlan, raw []byte, early *compression) (Saved, error) {
	var data []byte
	var frame bool
	if early != nil {
		var err error
		if data, frame, err = early.wait(); err != nil {
			return Saved{}, err
		}
	}
	stripped, vals, added, deadline, err := e.storeValues(ctx, s.key.Namespace, raw, p.largeStrings(raw))
	if err != nil {
		if early != nil {
			s.enc = nil // it has compressed the piece; the stored stream has not
		}
		return Saved{}, err
	}
	piece := &pieceInfo{Messages: p.messages, RawBytes: int64(len(stripped)), CRC: crc32.Checksum(stripped, castagnoli), Values: vals}
	if p.rewrite {
		piece.Keep = &p.keepBytes
	}
	if early != nil {
		piece.Frame = frame
	} else if data, err = e.compress(s, piece, stripped, false); err != nil {
		return Saved{}, err
	}
	next.StoredBytes = int64(len(data)) + added
	m := entryMeta{Kind: kindSave, Head: next, Piece: piece}
	// The tail counts whole entries, meta included: a pack's records then stay well within an
	// entry, however long a save's strings. A save that compresses very well counts what it
	// decodes to over rawPerTailByte instead: rewrites of a compressible conversation would
	// otherwise pile generations up, each one decoded by every read, before a pack is due.
	size, err := s.encodedSize(m, data)
	if err == nil {
		m.Head.TailBytes += max(size, piece.RawBytes/rawPerTailByte)
		_, err = e.writeBy(ctx, s, m, data, deadline)
	}
	if err != nil {
		s.enc = nil // it has compressed the piece; the stored stream has not
		return Saved{}, err
	}
	if next.Parent == 0 && piece.Frame && piece.RawBytes >= handOverBytes {
		// A session's first save gives its encoder back at once, for the next session's first
		// save: taken from the pool with its match tables still in the caches, it compresses 19.5
		// KB in ~0.10-0.14 ms instead of the ~0.23 ms of an encoder a session left 64 sessions
		// ago (docs/format.md §8.15g). This session's next save starts a frame, without the first
		// save's history.
		s.dropEncoder()
	}
	rec, err := recordOf(s.key, m.Head)
	if err != nil {
		return Saved{}, err
	}
	s.recent.add(rec)
	return Saved{Record: rec, PackDue: e.packDue(m.Head)}, nil
}

// nextHead is the head after the save: the plan applied to the session's head, raw being the
// piece's bytes (values included); an import takes the number, time and origin it declares once
// its hash is checked. Its tail counts the save's entry but for its size.
func nextHead(s *session, req SaveRequest, p savePlan, raw []byte) (headState, error) {
	return nextHeadFrom(s, s.last.Head, req, p, raw)
}

// nextHeadFrom is nextHead from head h (in a group, the head the saves before it make; group.go
// sets the tail counters of the group's entry itself).
func nextHeadFrom(s *session, h headState, req SaveRequest, p savePlan, raw []byte) (headState, error) {
	next := h
	state := h.State
	if p.rewrite {
		state = p.keepState
	}
	var err error
	if next.State, err = extendHash(state, raw); err != nil {
		return headState{}, err
	}
	next.RawBytes = p.keepBytes + int64(len(raw))
	next.Counts = p.counts
	next.Version, next.Parent = h.Version+1, h.Version
	next.SaveID, next.Writer, next.Reason, next.Dialect = req.SaveID, req.Writer, req.Reason, req.Limits.Dialect
	next.Created, next.ForkOf, next.Origin = req.Now.UTC(), req.ForkOf, nil
	if imp := req.Import; imp != nil {
		hash, err := finish(next.State)
		if err != nil {
			return headState{}, err
		}
		if hash != imp.Hash {
			return headState{}, fmt.Errorf("%w: version %d of %s: declared %s, the conversation hashes to %s", ErrHashMismatch, imp.Version, req.Key, imp.Hash, hash)
		}
		next.Version, next.Created = imp.Version, imp.Created.UTC()
		origin := imp.Origin
		next.Origin = &origin
		if h.Version == 0 {
			next.FirstVersion = imp.Version // the versions before it were never here
		}
		next.Moved = nil // the session is back: it was migrated here again
	}
	next.Pack, next.Deleted = s.lastPack(), s.lastDeleted()
	next.TailEntries, next.TailBytes = h.TailEntries+1, h.TailBytes
	if s.last.Kind == kindPack {
		next.TailEntries, next.TailBytes, next.TailExtra = 1, 0, 0
	}
	return next, nil
}

// besideBytes is the size of a save's new bytes from which commit compresses them on a goroutine of
// their own, beside the head's hash: below it, the hash (32 µs or less) costs less than handing over.
const besideBytes = 64 << 10

// handOverBytes is the size of a session's first piece from which its encoder is given back after
// it (commitHead): what a cold encoder costs grows with the bytes compressed (a lookup in its match
// tables each), what the session's next save loses without their history does not. A first save of
// a few messages keeps its encoder, as the corpus saved turn by turn does (its stored bytes unchanged).
const handOverBytes = 16 << 10

// compression is a save's compression running beside the rest of its commit (compressBeside).
type compression struct {
	raw   []byte // what it compresses
	done  chan struct{}
	piece pieceInfo // only its Frame is set
	data  []byte
	err   error
}

// compressBeside starts compressing raw, a save's new bytes, as compress does, on a goroutine of its
// own, when they are large and hold no value to store apart (storeValues then returns raw itself,
// which is what is compressed); otherwise it returns nil. A compression begun ahead of the plan
// (compressAhead) is that compression if it compresses raw itself, and is abandoned otherwise.
// s.mu is held: until wait or abandon the session's encoder is the goroutine's.
func (e *Engine) compressBeside(s *session, p savePlan, raw []byte, ahead *compression) *compression {
	if len(raw) < besideBytes || len(valueSpans(raw, p.largeStrings(raw))) > 0 {
		ahead.abandon(s)
		return nil
	}
	if ahead.holds(raw) {
		return ahead
	}
	ahead.abandon(s)
	return e.compressOn(s, raw)
}

// compressOn compresses raw, as compress does, on a goroutine of its own.
func (e *Engine) compressOn(s *session, raw []byte) *compression {
	c := &compression{done: make(chan struct{}), raw: raw}
	go func() {
		defer close(c.done)
		c.data, c.err = e.compress(s, &c.piece, raw, false)
	}()
	return c
}

// compressAhead starts compressing a save's messages before the plan has validated them, when the
// piece the save stores is most likely the payload's messages as sent: the session's head has no
// message and no frame under way (a first save), and the payload looks canonical (its first
// aheadProbe bytes have no white space outside strings; the SDK's JSON and JSON.stringify's have
// none), as most large first saves are. Validation then runs beside the compression instead of
// before it (docs/format.md §8.15j). compressBeside uses it only if the plan's new bytes are those
// very bytes (the same memory: a payload the parse had to copy, or changed, or one holding values
// to store apart, is compressed again and this is abandoned); a refused save abandons it. Payloads
// from besideBytes to maxAheadBytes only: a refused one has cost its compression, which a larger
// one would make long.
func (e *Engine) compressAhead(s *session, req SaveRequest) *compression {
	pl := req.Payload
	if s.last.Head.Counts.Messages > 0 || s.enc != nil || len(pl) < besideBytes+2 || len(pl) > maxAheadBytes ||
		pl[0] != '[' || pl[len(pl)-1] != ']' || !codec.LooksCompact(pl[:min(len(pl), aheadProbe)]) {
		return nil
	}
	return e.compressOn(s, pl[1:len(pl)-1])
}

// aheadProbe is how much of a payload compressAhead reads to guess that it is canonical, and
// maxAheadBytes the largest payload it compresses before validation.
const (
	aheadProbe    = 4 << 10
	maxAheadBytes = 8 << 20
)

// holds reports whether c compresses raw itself (the same bytes in the same memory). nil holds
// nothing.
func (c *compression) holds(raw []byte) bool {
	return c != nil && len(raw) > 0 && len(c.raw) == len(raw) && &c.raw[0] == &raw[0]
}

// wait returns the compressed bytes and whether they start a frame (pieceInfo.Frame).
func (c *compression) wait() ([]byte, bool, error) {
	<-c.done
	return c.data, c.piece.Frame, c.err
}

// abandon waits for a compression whose save is not written, and drops the session's encoder (it has
// compressed bytes the stored stream does not have). nil is ignored.
func (c *compression) abandon(s *session) {
	if c == nil {
		return
	}
	if _, _, err := c.wait(); err == nil {
		s.dropEncoder()
	}
}

// compress runs the piece's bytes through the session's encoder and returns the stream's bytes
// for them, setting piece.Frame when they start a frame (no encoder: first save, restart,
// eviction, a lost compare-and-swap, or after a recompressed pack). An empty piece (a save that
// adds no message) has no data and never starts a frame.
//
// group says the bytes are a group entry's (SaveGroup, two saves or more): a frame it starts is
// compressed at zstd's fastest level, as with Config.FastSaves. Saves that arrive in groups are a
// session saving faster than its entries are written, bound by CPU: on the corpus's pairs in
// groups of 8, the engine's CPU per save (the group's part, BenchmarkSaveGroup) went from 33 to
// 28 µs, for a tail ~8 % larger until the next pack, which compresses it again at its own level
// (docs/format.md §8.15p). The disk targets are a session saved turn by turn, one save at a
// time: unchanged. A frame keeps its level: a group continuing a frame a single save started
// continues it at the default level (a new frame would compress that group without the
// history), and single saves continue a group's frame at the fastest.
func (e *Engine) compress(s *session, piece *pieceInfo, stripped []byte, group bool) ([]byte, error) {
	if s.last.Kind == kindPack && (!s.last.Open || !group && !e.cfg.PackOpen || !e.runContinues(s, stripped)) {
		// A recompressed pack ended the frames before it. After an open pack a group continues
		// its frame (with its history), but a single save starts a new one: else a session that
		// saved in groups and then turn by turn would continue the groups' frame, at the
		// fastest level, and its tails of single saves would be packed open too (continuesFrame)
		// instead of compressed again (docs/format.md §8.15s).
		// Nor does it continue once the run a reader decodes at once would pass maxRun (runRaw).
		s.dropEncoder()
	}
	if len(stripped) == 0 {
		return nil, nil
	}
	if s.enc != nil && s.encRaw+int64(len(stripped)) > e.maxRun {
		s.dropEncoder() // the run would decode to too much at once: a new frame
	}
	piece.Frame = s.enc == nil
	large := piece.Frame && len(stripped) >= 2*splitBytes
	if piece.Frame {
		// A session's first piece, when large, at the fastest level: commitHead gives its encoder
		// back right after (handOverBytes), so the session's next saves are at the default one.
		fast := e.cfg.FastSaves || group || large && s.last.Head.Version == 0
		var err error
		if s.enc, err = newEncoder(e.cfg.Window, fast); err != nil {
			return nil, err
		}
		s.encRaw, s.runRaw = 0, -1
		if s.last.Kind == kindPack || s.last.Head.TailEntries == 0 {
			s.runRaw = 0 // the tail's first piece (no entry since the last pack): a reader's run starts here
		}
	}
	s.encRaw += int64(len(stripped))
	if s.runRaw >= 0 {
		s.runRaw += int64(len(stripped))
	}
	add := s.enc.add
	if large && runtime.GOMAXPROCS(0) > 1 {
		add = s.enc.addSplit // a large first piece: on two cores
	}
	data, err := add(stripped)
	if err != nil {
		s.enc = nil
		return nil, err
	}
	return data, nil
}

// runContinues says whether stripped, the first piece after an open pack, may continue the
// session's frame as far as a reader is concerned: a reader decodes an open pack that does not
// start a frame with the run before it, at once (logBuilder.addPack), and refuses a run of more
// than maxDecoded. Frames alone would not bound that run: a session saved only in groups packs
// every tail open, each continuing the frame of the one before, and its whole history would be one
// run (past 256 MiB of saves, rewrites included, no version after it would read back). So a frame
// continues across an open pack only while the run since the tail that began it stays within
// maxRun; past it, or when that run is not known (runRaw), the next tail starts a frame.
func (e *Engine) runContinues(s *session, stripped []byte) bool {
	return s.enc != nil && s.runRaw >= 0 && s.runRaw+int64(len(stripped)) <= e.maxRun
}

// rawPerTailByte: a save counts at least its decoded bytes over this in the tail (commitHead), so
// that a tail due at PackBytes decodes to at most about rawPerTailByte × PackBytes (4 MiB by
// default). Ordinary saves compress less than that and count their stored bytes.
const rawPerTailByte = 16

// maxRun bounds what a run of saves sharing a zstd frame decodes to (compress): a read decodes a
// run at once, and a save that would take its run past it starts a new frame. Far below the
// decoder's maxDecoded, and far above an ordinary run (a tail is packed at PackBytes).
const maxRun = 64 << 20

// packDue says whether the entries since the last pack are due to be packed.
func (e *Engine) packDue(h headState) bool {
	return !e.cfg.NoPack && (h.TailEntries+h.TailExtra >= e.cfg.PackEntries || h.TailBytes >= e.cfg.PackBytes)
}

// dialectLimits are the limits of a copy of a stored conversation of dialect d: none but its
// dialect (it was validated when it was saved).
func dialectLimits(d string) codec.Limits { return codec.Limits{Dialect: d} }
