package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// ErrConflict matches a *ConflictError with errors.Is.
var ErrConflict = errors.New("conflict")

// ConflictError refuses a save whose expected version is not the session's head.
type ConflictError struct {
	Key      Key
	Expected uint64
	Head     uint64
	Detail   string // replaces the usual message when set
}

func (e *ConflictError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("session %s: %s", e.Key, e.Detail)
	}
	return fmt.Sprintf("session %s: expected to extend version %d, but the head is version %d", e.Key, e.Expected, e.Head)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// SaveRequest is one save. Payload is a JSON array: the whole conversation, or, with Base set, only
// the messages appended to version *Base (which must be the head).
type SaveRequest struct {
	Key      Key
	SaveID   string  // idempotency key: a save id already at the head is not stored again
	Expected *uint64 // when set, the head must be this version (0: the session must not exist)
	Base     *uint64 // when set, Payload holds only the messages appended to this version
	Writer   string
	Reason   string
	ForkOf   *ForkRef // recorded on the version: the session was forked from there
	Epoch    uint64   // the writer's lease epoch; 0: the writer holds no lease
	Import   *Import  // set when copying a version from elsewhere (migrate, import)
	Payload  []byte
	Limits   codec.Limits
	Now      time.Time
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

// ErrHashMismatch refuses an import whose conversation does not have the hash it declared.
var ErrHashMismatch = errors.New("conversation does not match the declared hash")

// Saved is the outcome of Save.
type Saved struct {
	Head      Head
	Duplicate bool // the save id was already the head; nothing new was written
}

// maxSwapAttempts bounds the retries when other writers keep moving the head; each retry means
// another version was committed, so the session is making progress.
const maxSwapAttempts = 64

// Save makes req the next version of its session, storing only the messages its parent lacks.
// The commit point is the head swap: a crash before it leaves at most an unreferenced segment, a
// crash after it leaves the version index entry to be repaired by the next save.
func Save(ctx context.Context, st Store, req SaveRequest) (Saved, error) {
	if req.Base != nil {
		if req.Expected != nil && *req.Expected != *req.Base {
			return Saved{}, fmt.Errorf("%w: expected version %d and base version %d disagree", ErrBadRequest, *req.Expected, *req.Base)
		}
		req.Expected = req.Base
	}
	if req.Limits.Dialect == codec.DialectNative {
		req.Limits.Dialect = "" // recorded as nothing, so native records stay as they were
	}
	if err := codec.CheckDialect(req.Limits.Dialect); err != nil {
		return Saved{}, err
	}
	if req.Limits.MaxBytes > 0 && int64(len(req.Payload)) > req.Limits.MaxBytes {
		return Saved{}, &codec.ValidationError{Err: codec.ErrTooLarge, Index: -1, Offset: -1,
			Detail: fmt.Sprintf("%d bytes, the limit is %d", len(req.Payload), req.Limits.MaxBytes)}
	}
	for attempt := 0; attempt < maxSwapAttempts; attempt++ {
		head, rev, err := st.Head(ctx, req.Key)
		if errors.Is(err, ErrNotFound) {
			head = emptyHead(req.Key)
		} else if err != nil {
			return Saved{}, err
		}
		found := head.Exists()
		if found && req.SaveID != "" && head.SaveID == req.SaveID {
			return Saved{Head: head, Duplicate: true}, nil
		}
		if v, ok, err := savedRecently(ctx, st, head, req.SaveID); err != nil || ok {
			dup := head
			dup.Version = v
			return Saved{Head: dup, Duplicate: true}, err
		}
		// Only a migration brings a moved session back; an import of a bundle does not.
		comingBack := req.Import != nil && req.Import.Origin.Via == ReasonMigrate
		if req.Import != nil && req.Import.Version <= head.Version.Version {
			saved, err := importedBefore(ctx, st, head, *req.Import)
			if err != nil || !comingBack || head.Moved == nil || req.Import.Version != head.Version.Version {
				return saved, err
			}
			// Migrated back with nothing new to copy: the session is here again all the same.
			next := head
			next.Moved = nil
			if err := st.SwapHead(ctx, next, rev); errors.Is(err, ErrRevisionMismatch) {
				continue
			} else if err != nil {
				return Saved{}, err
			}
			return Saved{Head: next, Duplicate: true}, nil
		}
		if err := checkWrite(head, req.Key, req.Epoch, comingBack, req.Now); err != nil {
			return Saved{}, err
		}
		if err := checkNumber(head, found, req.Import); err != nil {
			return Saved{}, err
		}
		if err := checkDialect(head, found, req.Limits.Dialect); err != nil {
			return Saved{}, err
		}
		if req.Expected != nil && *req.Expected != head.Version.Version {
			// A save retried after its outcome was lost finds the head moved on by its own
			// version and later ones: that is a duplicate, not a conflict.
			if v, ok := savedAfter(ctx, st, head, *req.Expected, req.SaveID); ok {
				dup := head
				dup.Version = v
				return Saved{Head: dup, Duplicate: true}, nil
			}
			return Saved{}, &ConflictError{Key: req.Key, Expected: *req.Expected, Head: head.Version.Version}
		}
		if found {
			// Repair: the previous save may have crashed between its commit and its index write.
			if err := st.PutVersion(ctx, head.Version); err != nil {
				return Saved{}, err
			}
		}
		p, err := plan(ctx, st, head, found, req)
		if err != nil {
			return Saved{}, err
		}
		c, err := commitPlan(ctx, st, head, found, req, p)
		next := c.next
		if err == nil && req.Import != nil {
			err = asImported(&next, found, *req.Import)
		}
		if err == nil {
			err = c.inTime()
		}
		if err != nil {
			discard(ctx, st, req.Key, c.wrote)
			return Saved{}, err
		}
		if err := st.SwapHead(ctx, next, rev); err != nil {
			if errors.Is(err, ErrRevisionMismatch) {
				// Nothing refers to what this attempt wrote: remove it, then look at the new head.
				discard(ctx, st, req.Key, c.wrote)
				continue // another writer committed first
			}
			// Any other failure may be a swap that was applied and whose answer was lost (a leader
			// died): the head may refer to what was written, so it stays; unreferenced, the sweep
			// removes it.
			return Saved{}, err
		}
		// The version is committed. Should indexing fail, the next save repairs it and reads of the
		// head don't need it, so the save still succeeded.
		_ = st.PutVersion(ctx, next.Version)
		if len(c.merged) > 0 {
			// Best effort: a segment left behind is garbage, never a wrong answer.
			_, _, _ = deleteUnreferenced(ctx, st, next, c.merged)
		}
		return Saved{Head: next}, nil
	}
	return Saved{}, fmt.Errorf("%w: session %s: head kept moving after %d attempts", ErrBusy, req.Key, maxSwapAttempts)
}

// maxDuplicateScan bounds how many versions after the expected one are searched for a save id.
const maxDuplicateScan = 256

// savedAfter finds the version save id made, among the few after version after.
func savedAfter(ctx context.Context, st Store, head Head, after uint64, saveID string) (Version, bool) {
	if saveID == "" || after >= head.Version.Version {
		return Version{}, false
	}
	for n := after + 1; n <= head.Version.Version && n <= after+maxDuplicateScan; n++ {
		v, err := GetVersion(ctx, st, head.Key, n, nil)
		if err == nil && v.SaveID == saveID {
			return v, true
		}
	}
	return Version{}, false
}

// importedBefore settles an import of a version the session already has: a duplicate if it is the
// same conversation, a conflict if not.
func importedBefore(ctx context.Context, st Store, head Head, imp Import) (Saved, error) {
	v, err := GetVersion(ctx, st, head.Key, imp.Version, nil)
	if errors.Is(err, ErrNotFound) {
		return Saved{}, &ConflictError{Key: head.Key, Expected: imp.Version - 1, Head: head.Version.Version,
			Detail: fmt.Sprintf("cannot import version %d: the session is already at version %d and does not keep %d", imp.Version, head.Version.Version, imp.Version)}
	}
	if err != nil {
		return Saved{}, err
	}
	if v.Hash != imp.Hash {
		return Saved{}, &ConflictError{Key: head.Key, Expected: imp.Version - 1, Head: head.Version.Version,
			Detail: fmt.Sprintf("cannot import version %d: this session has a different version %d (%s, importing %s)", imp.Version, imp.Version, v.Hash, imp.Hash)}
	}
	dup := head
	dup.Version = v
	return Saved{Head: dup, Duplicate: true}, nil
}

// ErrVersionLimit refuses a save onto a session whose head is version MaxVersion: numbers never
// wrap, so the session takes no more versions (fork it to go on).
var ErrVersionLimit = fmt.Errorf("%w: no version number left", ErrBadRequest)

// checkNumber refuses a save whose version number would leave 1..MaxVersion, and an import that
// does not continue the session's own line: on a session with versions, an import is the head's
// next version (a jump would leave numbers nobody can read, and let a writer push another's session
// to the last number); only an empty session may start anywhere, as a copy of a source whose oldest
// versions were pruned does. Imports of versions the session already has were settled before this.
func checkNumber(head Head, found bool, imp *Import) error {
	switch {
	case imp != nil && (imp.Version < 1 || imp.Version > MaxVersion):
		return fmt.Errorf("%w: import of version %d: versions are 1..%d", ErrBadRequest, imp.Version, MaxVersion)
	case imp != nil && found && imp.Version != head.Version.Version+1:
		return &ConflictError{Key: head.Key, Expected: imp.Version - 1, Head: head.Version.Version,
			Detail: fmt.Sprintf("cannot import version %d: the head is version %d, and an import continues a session at its next version (%d)", imp.Version, head.Version.Version, head.Version.Version+1)}
	case imp == nil && head.Version.Version >= MaxVersion:
		return fmt.Errorf("%w: session %s is at version %d, the largest there is", ErrVersionLimit, head.Key, head.Version.Version)
	}
	return nil
}

// ErrDialectMismatch refuses a save in another dialect than the session's versions: a session
// holds one shape of conversation, so that every version restores as what its readers expect and
// an append is validated against the history it extends.
var ErrDialectMismatch = fmt.Errorf("%w: dialect mismatch", ErrBadRequest)

// checkDialect refuses a save whose dialect (normalised: "" is native) is not the session's.
func checkDialect(head Head, found bool, dialect string) error {
	if !found || head.Version.Dialect == dialect {
		return nil
	}
	name := func(d string) string {
		if d == "" {
			return codec.DialectNative
		}
		return d
	}
	return fmt.Errorf("%w: session %s holds %s conversations and this save is %s; save it as %s, or into a new session (a session keeps one dialect)",
		ErrDialectMismatch, head.Key, name(head.Version.Dialect), name(dialect), name(head.Version.Dialect))
}

// asImported gives the version its original number, time and origin, once its hash is checked.
func asImported(next *Head, found bool, imp Import) error {
	if next.Version.Hash != imp.Hash {
		return fmt.Errorf("%w: version %d of %s: declared %s, the conversation hashes to %s", ErrHashMismatch, imp.Version, next.Key, imp.Hash, next.Version.Hash)
	}
	next.Version.Version = imp.Version
	next.Version.Created = imp.Created.UTC()
	next.Version.Origin = &imp.Origin
	if !found {
		next.FirstVersion = imp.Version // the versions before it were never here
	}
	next.Moved = nil // the session is back: it was migrated here again
	return nil
}

// ErrBadRequest marks a save that contradicts itself.
var ErrBadRequest = errors.New("bad request")

// ErrBusy reports a session whose head other writers kept moving: try again.
var ErrBusy = errors.New("session busy")

// savePlan is what a save adds: keep the first keep messages of the head's generation, then tail.
type savePlan struct {
	keep    int
	kept    [][]byte    // on a rewrite, the first keep messages: the head's, byte for byte
	tail    [][]byte    // the new messages, canonical
	stats   codec.Stats // of the whole new conversation when canon is set, else of tail
	rewrite bool        // keep < the head's messages: history changed, a new generation
	canon   []byte      // the whole canonical conversation, when it had to be parsed whole
	tailRaw []byte      // tail joined by commas: a span of the parsed buffer, not a copy
}

// plan works out what a save adds to the head. The common cases cost only the new messages:
// a client that sends what it appended (Base), and a client that resends its whole array in
// canonical form (recognised by hashing the prefix the head already has).
func plan(ctx context.Context, st Store, head Head, found bool, req SaveRequest) (savePlan, error) {
	headMsgs := head.Counts.Messages
	tailLimits := req.Limits
	tailLimits.Continues = headMsgs > 0 // an append's first message is not the conversation's
	if req.Base != nil {
		c, err := codec.ParseLimited(req.Payload, tailLimits)
		if err != nil {
			return savePlan{}, shift(err, headMsgs, 0)
		}
		p := appendPlan(headMsgs, c)
		return p, checkGrowth(head, p, req.Limits)
	}
	if found && headMsgs > 0 {
		if tail, ok := canonicalTail(head, req.Payload); ok {
			c, err := codec.ParseLimited(tail, tailLimits)
			if err != nil {
				return savePlan{}, shift(err, headMsgs, head.RawBytes-1)
			}
			p := appendPlan(headMsgs, c)
			return p, checkGrowth(head, p, req.Limits)
		}
	}
	c, err := codec.ParseLimited(req.Payload, req.Limits)
	if err != nil {
		return savePlan{}, err
	}
	keep := 0
	if found && headMsgs > 0 {
		if keep, err = commonPrefix(ctx, st, head, c.Messages); err != nil {
			return savePlan{}, err
		}
	}
	p := savePlan{keep: keep, tail: toBytes(c.Messages[keep:]), stats: c.Stats(), canon: c.Encode(), tailRaw: c.Span(keep, len(c.Messages))}
	if p.rewrite = found && keep < headMsgs; p.rewrite {
		p.kept = toBytes(c.Messages[:keep])
	}
	return p, nil
}

// checkGrowth refuses an append that would take the conversation past the size limit: appends are
// small, but the conversation they grow is what the limit is for.
func checkGrowth(head Head, p savePlan, lim codec.Limits) error {
	if lim.MaxBytes > 0 && head.RawBytes+int64(len(p.tailRaw))+1 > lim.MaxBytes {
		return &codec.ValidationError{Err: codec.ErrTooLarge, Index: -1, Offset: -1,
			Detail: fmt.Sprintf("the conversation would grow to %d bytes, the limit is %d", head.RawBytes+int64(len(p.tailRaw))+1, lim.MaxBytes)}
	}
	return nil
}

func appendPlan(keep int, tail *codec.Conversation) savePlan {
	return savePlan{keep: keep, tail: toBytes(tail.Messages), stats: tail.Stats(), tailRaw: tail.Span(0, len(tail.Messages))}
}

// canonicalTail recognises payload as the head's canonical bytes plus more messages, hashing only
// the shared prefix, and returns the new messages as a JSON array.
func canonicalTail(head Head, payload []byte) ([]byte, bool) {
	n := head.RawBytes - 1 // the head's bytes without "]"
	if int64(len(payload)) <= n+1 || payload[n] != ',' {
		return nil, false
	}
	st, err := resumeHashState(head.State)
	if err != nil {
		return nil, false
	}
	sum := sha256.Sum256(payload[:n])
	if !bytes.Equal(sum[:], st.prefixSum()) {
		return nil, false
	}
	tail := make([]byte, 0, int64(len(payload))-n)
	tail = append(tail, '[')
	return append(tail, payload[n+1:]...), true
}

// commonPrefix returns how many leading messages msgs shares with the head. It reads the head's
// segments one at a time, without their values: a value is compared by its hash, so a rewrite of
// a conversation full of images reads none of them back.
func commonPrefix(ctx context.Context, st Store, head Head, msgs []json.RawMessage) (int, error) {
	msgs = msgs[:min(len(msgs), head.Counts.Messages)]
	k := 0
	for _, e := range head.Layout.Extents {
		if k == len(msgs) {
			break
		}
		stripped, err := readStripped(ctx, st, head.Layout.Key, e.Segment)
		if err != nil {
			return 0, err
		}
		n := matchSegment(stripped, e.Segment, msgs[k:min(len(msgs), k+e.Count)])
		if k += n; n < e.Count {
			break
		}
	}
	return k, nil
}

// matchSegment returns how many of msgs are the first messages of a segment, given its blob's
// bytes (its raw bytes without its values): the bytes between values are compared, a value by its
// SHA-256, and each message must end at a comma or at the end of the segment. msgs are JSON
// objects, as the parser hands them over: one never holds a whole message and more, so a match
// cannot straddle two of the segment's messages.
func matchSegment(stripped []byte, ref SegmentRef, msgs []json.RawMessage) int {
	vals := ref.Values
	pos, spos := int64(0), int64(0) // where the next message starts, in the raw and the stripped bytes
	same := func(m []byte) bool {   // m is the stripped bytes at spos
		if spos+int64(len(m)) > int64(len(stripped)) || !bytes.Equal(m, stripped[spos:spos+int64(len(m))]) {
			return false
		}
		spos += int64(len(m))
		return true
	}
	for i, m := range msgs {
		end, at := pos+int64(len(m)), int64(0) // at: how much of m is compared
		for ; len(vals) > 0 && vals[0].At < end; vals = vals[1:] {
			v := vals[0]
			if v.At < pos+at || v.At+v.RawBytes > end || !same(m[at:v.At-pos]) {
				return i
			}
			if valueID(m[v.At-pos:v.At-pos+v.RawBytes]) != v.ID {
				return i
			}
			at = v.At - pos + v.RawBytes
		}
		if !same(m[at:]) {
			return i
		}
		// The segment's message ends here too: at a comma, or at the end of the segment.
		if i+1 < ref.Messages {
			if len(vals) > 0 && vals[0].At == end || spos >= int64(len(stripped)) || stripped[spos] != ',' {
				return i
			}
			spos++
		} else if spos != int64(len(stripped)) || len(vals) > 0 {
			return i
		}
		pos = end + 1
	}
	return len(msgs)
}

// discard deletes segments an operation wrote but failed to commit. Segment ids are unique per
// write, so nothing else can refer to them. Failing here leaves garbage, never a wrong answer.
func discard(ctx context.Context, st Store, key Key, segs []SegmentRef) {
	for _, s := range segs {
		_ = st.DeleteSegment(ctx, key, s)
	}
}

// emptyHead stands for a session with no version yet: the empty conversation "[]".
func emptyHead(key Key) Head {
	hs := newHashState()
	hs.write([]byte{'['})
	return Head{Version: Version{Key: key, RawBytes: 2}, State: hs.marshal(), Layout: Layout{Key: key, Gen: 1}}
}

// commit is what commitPlan prepared.
type commit struct {
	next   Head         // the head to swap in
	merged []Extent     // extents merged away (the layout was at HardMaxExtents): delete once swapped
	wrote  []SegmentRef // every segment written: delete if the swap fails
	until  time.Time    // the values it refers to are safe from the sweep until then (zero: none)
}

// ErrTooSlow refuses to commit a save or a merge that took so long the values it refers to may
// have been swept meanwhile: try again.
var ErrTooSlow = errors.New("took too long to commit")

// inTime checks that the commit is still before its deadline.
func (c commit) inTime() error {
	if !c.until.IsZero() && time.Now().After(c.until) {
		return fmt.Errorf("%w: its values were last confirmed at %s", ErrTooSlow, c.until.Add(-SweepGrace/2).Format(time.RFC3339))
	}
	return nil
}

// earliest returns the earlier of two deadlines, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// commitPlan stores the plan's new segment and prepares the head to swap in.
func commitPlan(ctx context.Context, st Store, head Head, found bool, req SaveRequest, p savePlan) (c commit, err error) {
	// Start from the current head so that everything it carries (archives, older generations) is
	// carried on; only what a save changes is set below.
	c.next = head
	next := &c.next
	layout := Layout{Key: req.Key, Gen: max(head.Layout.Gen, 1)}
	if p.rewrite {
		// The head's generation stays readable for its versions; the new one starts from the
		// unchanged prefix.
		if err := st.PutLayout(ctx, head.Layout); err != nil {
			return c, err
		}
		next.OldGens = append(append([]uint64(nil), head.OldGens...), head.Layout.Gen)
		layout.Gen = head.Layout.Gen + 1
		kept, err := prefixExtents(head.Layout, p.kept)
		if err != nil {
			return c, err
		}
		layout.Extents = kept
	} else if found {
		layout.Extents = append([]Extent(nil), head.Layout.Extents...)
	}
	var added int64
	if len(p.tail) > 0 {
		ref, n, until, err := putMessages(ctx, st, req.Key, p.tailRaw, len(p.tail))
		if err != nil {
			return c, err
		}
		c.wrote = append(c.wrote, ref)
		added = n
		c.until = until
		layout.Extents = append(layout.Extents, Extent{Segment: ref, Count: len(p.tail), RawBytes: ref.RawBytes})
	}

	// The hash: extend the head's state by the new bytes, or hash the whole canonical form.
	var hs hashState
	var rawBytes int64
	var counts Counts
	if p.canon != nil {
		hs = newHashState()
		hs.write(p.canon[:len(p.canon)-1])
		rawBytes = int64(len(p.canon))
		counts = toCounts(p.stats)
	} else {
		var err error
		if hs, err = resumeHashState(head.State); err != nil {
			return c, err
		}
		rawBytes = head.RawBytes
		for i, m := range p.tail {
			if head.Counts.Messages > 0 || i > 0 {
				hs.write([]byte{','})
				rawBytes++
			}
			hs.write(m)
			rawBytes += int64(len(m))
		}
		counts = addCounts(head.Counts, p.stats)
	}
	reason := req.Reason
	if reason == "" {
		reason = ReasonTurn
	}
	next.Recent = remember(head)
	next.Version = Version{
		Format: VersionFormat, Key: req.Key, Version: head.Version.Version + 1, Parent: head.Version.Version,
		Hash: hs.hash(), SaveID: req.SaveID, Writer: req.Writer, Reason: reason, Created: req.Now.UTC(),
		RawBytes: rawBytes, StoredBytes: added, Counts: counts, Gen: layout.Gen, ForkOf: req.ForkOf,
		Dialect: req.Limits.Dialect,
	}
	if len(layout.Extents) > HardMaxExtents {
		m, err := mergeRun(ctx, st, req.Key, layout.Extents, mergeFrom(layout.Extents))
		if err != nil {
			return c, err
		}
		layout.Extents, c.merged, c.until = m.extents, m.run, earliest(c.until, m.until)
		c.wrote = append(c.wrote, m.ref)
	}
	next.State = hs.marshal()
	next.Layout = layout
	return c, nil
}

// putSegment stores raw as a new segment and returns its reference and the bytes it added. Every
// segment gets a fresh id, never shared by two writes: so a segment that compaction merged away can
// only be referred to by heads the compaction's swap already replaced, and deleting it is safe.
func putSegment(ctx context.Context, st Store, key Key, raw []byte, messages int) (SegmentRef, int64, error) {
	ref, err := putBlob(ctx, st, key, newSegmentID(), raw)
	ref.Messages = messages
	return ref, ref.StoredBytes, err
}

// newSegmentID returns a fresh random segment id.
func newSegmentID() string {
	var id [16]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	return hex.EncodeToString(id[:])
}

// putBlob stores raw's blob as segment id of key; its reference has RawBytes, Chunks and
// StoredBytes filled in.
func putBlob(ctx context.Context, st Store, key Key, id string, raw []byte) (SegmentRef, error) {
	if len(raw) >= StreamBytes {
		return streamBlob(ctx, st, key, id, bytes.NewReader(raw), int64(len(raw)))
	}
	blob := codec.EncodeBlob(raw)
	return st.PutSegment(ctx, key, SegmentRef{ID: id, RawBytes: int64(len(raw)), StoredBytes: int64(len(blob))}, blob)
}

// StreamBytes is the segment size from which segments are compressed and stored, and read back and
// decoded, piece by piece: no whole compressed copy is ever held, and a read decodes straight into
// the conversation it assembles.
const StreamBytes = 4 << 20

// putBlobFrom stores the blob of the size bytes r reads as segment id of key: from StreamBytes on,
// compressed into the store as it goes (streamBlob).
func putBlobFrom(ctx context.Context, st Store, key Key, id string, r io.Reader, size int64) (SegmentRef, error) {
	if size >= StreamBytes {
		return streamBlob(ctx, st, key, id, r, size)
	}
	raw := make([]byte, size)
	if _, err := io.ReadFull(r, raw); err != nil {
		return SegmentRef{}, err
	}
	return putBlob(ctx, st, key, id, raw)
}

// streamBlob compresses what r reads into the store as segment id of key, a piece at a time,
// through a pipe: no compressed copy is ever held whole.
func streamBlob(ctx context.Context, st Store, key Key, id string, r io.Reader, size int64) (SegmentRef, error) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		bw, err := codec.NewBlobWriter(pw)
		if err == nil {
			_, err = io.Copy(bw, r)
			if cerr := bw.Close(); err == nil {
				err = cerr
			}
		}
		pw.CloseWithError(err)
	}()
	ref, err := st.PutSegmentFrom(ctx, key, SegmentRef{ID: id, RawBytes: size}, pr)
	pr.CloseWithError(io.ErrClosedPipe) // unblocks the writer if the store gave up early
	<-done
	return ref, err
}

// shift renumbers a validation error in the appended messages to the whole conversation: message
// indexes by the messages before them, byte offsets by the bytes before them.
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

func toBytes(msgs []json.RawMessage) [][]byte {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = m
	}
	return out
}

func toCounts(s codec.Stats) Counts {
	return Counts{Messages: s.Messages, User: s.User, Assistant: s.Assistant, ToolResult: s.ToolResult, Extension: s.Extension, ToolCalls: s.ToolCalls, System: s.System}
}

func addCounts(c Counts, s codec.Stats) Counts {
	t := toCounts(s)
	return Counts{Messages: c.Messages + t.Messages, User: c.User + t.User, Assistant: c.Assistant + t.Assistant,
		ToolResult: c.ToolResult + t.ToolResult, Extension: c.Extension + t.Extension, ToolCalls: c.ToolCalls + t.ToolCalls,
		System: c.System + t.System}
}
