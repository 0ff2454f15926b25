package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/checkpointd/checkpointd/internal/bufpool"
)

// Group commit (docs/format.md §8.15m): the saves of one session that arrive together (an SDK's
// appends sent while the one before was in flight) are stored as ONE entry, written with the
// session's compare-and-swap: each save keeps its own version, record, save id, writer, reason,
// epoch check and hash, and their new messages go through the session's encoder at once, one run
// of zstd blocks instead of k (a save is one flush and one publish, not k). With 50 agents, a save
// answered after its own publish costs 6-9x an async publish's CPU before any work; eight saves
// per publish bring that floor to 0.8-1.1x (§8.15l).

// GroupResult is the outcome of one save of a group: Saved, or Err (typed as Save's errors).
type GroupResult struct {
	Saved Saved
	Err   error
}

// Bounds of one group entry: a group of more saves, or more new bytes, goes in several entries,
// each its own compare-and-swap (SaveGroup still answers every save). maxGroup keeps a group's
// records (~65-105 bytes each, delta-coded as a pack's) far within an entry; maxGroupBytes keeps
// its data a run of the stream an ordinary read decodes at once (a save larger than it alone
// makes an entry of its own, in parts if it must, as Save does).
const (
	maxGroup      = 64
	maxGroupBytes = 1 << 20
)

// groupRefusedDetail is what the saves after a refused one are told (a conflict's detail): their
// base no longer holds.
const groupRefusedDetail = "an earlier save of the group was refused"

// SaveGroup stores reqs, saves of ONE session (same Key) in order, as consecutive versions, in as
// few entries as it can (one, normally), each save keeping its own version, record, save id,
// writer, reason, epoch, hash. reqs[i+1] extends what reqs[i] makes: for i>0, reqs[i].Base (when
// set) must be the version reqs[i-1] makes, or that save is a conflict. A save refused (invalid,
// conflict, fenced, save id reused...) fails that save; the saves after it in the group are
// refused as conflicts ("an earlier save of the group was refused") without being stored; the
// saves before it are stored. (A save that fails for the store's sake instead, unavailable or its
// outcome unknown, gives the saves after it that error, not a conflict: notAttempted.) A save id
// already saved is a duplicate (as Save) and the group goes on from that version.
// len(result) == len(reqs) always.
//
// Each save is decided as Save decides it, against the head the saves before it make. A save
// that needs the head's messages read to be planned (a whole array that does not extend the head
// in canonical form: a rewrite), an import, or one past maxGroup or maxGroupBytes ends the entry
// under way: the entry is written, and the save starts the next one. Saved.PackDue is set on the
// last save of each entry that makes a pack due.
func (e *Engine) SaveGroup(ctx context.Context, reqs []SaveRequest) []GroupResult {
	out := make([]GroupResult, len(reqs))
	for i := 0; i < len(reqs); {
		var n int
		if e.invalid != nil {
			out[i].Err, n = e.invalid, 1
		} else {
			n = e.saveRun(ctx, reqs[i:], out[i:]) // (a save of another session is refused: decide)
		}
		i += n
		if err := out[i-1].Err; err != nil {
			for j := i; j < len(reqs); j++ {
				out[j].Err = notAttempted(reqs[j].Key, err)
			}
			break
		}
	}
	return out
}

// notAttempted is what a save after a failed one of its group is told, without being stored:
// after a refusal, a conflict (its base no longer holds); after any other failure (the store
// unavailable, a write whose outcome is unknown), that failure, so that a caller retries as it
// would retry the failed save.
func notAttempted(key Key, err error) error {
	if IsRefusal(err) {
		return &ConflictError{Key: key, Detail: groupRefusedDetail}
	}
	return fmt.Errorf("session %s: not stored, an earlier save of the group failed: %w", key, err)
}

// saveRun stores the longest prefix of reqs that one entry takes (at least one save is decided),
// filling out for it, and returns how many saves it decided. A lost compare-and-swap, or a first
// save refused from a cached head the log has moved past, decides them all again from the log.
func (e *Engine) saveRun(ctx context.Context, reqs []SaveRequest, out []GroupResult) int {
	for attempt := 0; attempt < maxSwapAttempts; attempt++ {
		s := e.session(reqs[0].Key)
		res, err := e.runOnce(ctx, s, reqs)
		if err != nil && e.again(ctx, s, err) {
			continue
		}
		return copy(out, res)
	}
	out[0].Err = fmt.Errorf("%w: session %s: head kept moving after %d attempts", ErrBusy, reqs[0].Key, maxSwapAttempts)
	return 1
}

// pendingSave is a save of a group decided and not yet written: its request, plan and new bytes,
// and the head it makes.
type pendingSave struct {
	req  SaveRequest
	plan savePlan
	raw  []byte
	next headState
	at   int // its index in the run
}

// groupRun is a run of a group being decided (s.mu held): the head the saves decided so far make,
// and those still to write.
type groupRun struct {
	head    headState
	pending []pendingSave
	repeats []int // the indexes of saves answered as duplicates of pending ones (repeatInGroup)
	bytes   int64 // the pending saves' new bytes
	meta    int64 // a bound of the pending saves' metadata in the entry (groupMetaBytes)
	checked bool  // the cached last entry was checked against the log (checkCached) during the run
	closed  bool  // no more saves join the pending ones (an import was decided)
}

// groupStep is what deciding one save of a run leads to.
type groupStep int

const (
	stepPending   groupStep = iota // the save joins the entry under way
	stepDuplicate                  // answered (a duplicate), nothing to write
	stepRefused                    // refused: the run ends
	stepNext                       // the save starts the next entry: the run ends before it
)

// runOnce decides the saves of reqs against the session's head, one after another, until one is
// refused or must start another entry, and writes the decided ones as one entry. It returns the
// results of the saves it decided, and, when nothing was stored, the error that ended the run
// (Save's again says whether to decide them all again: a lost compare-and-swap, a stale cache).
func (e *Engine) runOnce(ctx context.Context, s *session, reqs []SaveRequest) ([]GroupResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cached := s.loaded
	if err := e.load(ctx, s); err != nil {
		return []GroupResult{{Err: err}}, err
	}
	g := &groupRun{head: s.last.Head}
	var res []GroupResult
	var refusal error
	for j := range reqs {
		r, step := e.decide(ctx, s, g, reqs[j], j, cached)
		if step == stepNext {
			break
		}
		res = append(res, r)
		if step == stepRefused {
			refusal = r.Err
			break
		}
	}
	if len(g.pending) == 0 {
		return res, refusal // nothing to write: a refusal from a stale head is decided again
	}
	saved, err := e.commitGroup(ctx, s, g.pending)
	if err != nil {
		// Nothing was stored: a save answered as the duplicate of a pending one is told so too
		// (its version does not exist), not only the pending saves.
		for _, p := range g.pending {
			res[p.at] = GroupResult{Err: err}
		}
		for _, j := range g.repeats {
			res[j] = GroupResult{Err: err}
		}
		return res[:g.pending[len(g.pending)-1].at+1], err
	}
	for i, p := range g.pending {
		res[p.at] = GroupResult{Saved: saved[i]}
	}
	return res, nil
}

// decide decides one save of a run, as Save's saveOnce does, against g.head (j: its index in the
// run). A save that joins the entry under way is added to g.pending and moves g.head on.
func (e *Engine) decide(ctx context.Context, s *session, g *groupRun, req SaveRequest, j int, cached bool) (GroupResult, groupStep) {
	refused := func(err error) (GroupResult, groupStep) { return GroupResult{Err: err}, stepRefused }
	if req.Key != s.key {
		return refused(fmt.Errorf("%w: a group of saves of session %s holds a save of %s", ErrBadRequest, s.key, req.Key))
	}
	if err := checkRequest(&req); err != nil {
		return refused(err)
	}
	h := g.head
	if len(g.pending) > 0 && (g.closed || req.Import != nil || len(g.pending) == maxGroup ||
		g.bytes+int64(len(req.Payload)) > maxGroupBytes || planReads(h, req)) {
		return GroupResult{}, stepNext
	}
	if req.SaveID != "" {
		if r, step, answered := e.repeatOf(ctx, s, g, req, j, cached); answered {
			return r, step
		}
	}
	comingBack := req.Import != nil && req.Import.Origin.Via == ReasonMigrate
	if req.Import != nil && req.Import.Version <= h.Version { // (nothing pending: see above)
		saved, err := e.importedBefore(ctx, s, *req.Import, comingBack)
		g.head = s.last.Head // it may have unsealed the session
		if err != nil {
			return refused(err)
		}
		return GroupResult{Saved: saved}, stepDuplicate
	}
	found := h.Version > 0
	if err := checkWrite(h, req.Key, req.Epoch, comingBack, req.Now); err != nil {
		return refused(err)
	}
	if err := checkNumber(req.Key, h, found, req.Import); err != nil {
		return refused(err)
	}
	if err := checkDialect(req.Key, h, found, req.Limits.Dialect); err != nil {
		return refused(err)
	}
	if req.Expected != nil && *req.Expected != h.Version {
		if len(g.pending) == 0 {
			// A save retried after its outcome was lost (as in saveOnce).
			if rec, ok := e.savedAfter(ctx, s, *req.Expected, req.SaveID); ok {
				unverified, err := e.checkRepeat(ctx, s, req, rec)
				if err != nil {
					return refused(err)
				}
				return GroupResult{Saved: Saved{Record: rec, Duplicate: true, Unverified: unverified}}, stepDuplicate
			}
		}
		return refused(&ConflictError{Key: req.Key, Expected: *req.Expected, Head: h.Version})
	}
	p, err := e.planFrom(ctx, s, h, req)
	if err != nil {
		return refused(err)
	}
	meta := groupMetaBytes(req, p)
	if len(g.pending) > 0 && g.meta+meta > int64(e.log.MaxEntry())/2 {
		// An entry's meta is never cut into parts (its data is): saves that each fit alone
		// (long writers and save ids, many values) must not make one whose meta does not.
		return GroupResult{}, stepNext
	}
	raw := p.newBytes()
	next, err := nextHeadFrom(s, h, req, p, raw)
	if err != nil {
		return refused(err)
	}
	g.pending = append(g.pending, pendingSave{req: req, plan: p, raw: raw, next: next, at: j})
	g.head, g.bytes, g.closed = next, g.bytes+int64(len(raw)), req.Import != nil
	g.meta += meta
	return GroupResult{}, stepPending
}

// repeatOf answers req if its save id was saved already (answered): by a save before it in the
// run (repeatInGroup), or by a stored version (a duplicate, once checkRepeat finds it the same
// save; as in saveOnce, a duplicate found in the cache is checked to be the log's, once a run:
// another daemon may have deleted the session since). An import is that version only with its
// number and hash too. Otherwise req is a new save, decided by decide.
func (e *Engine) repeatOf(ctx context.Context, s *session, g *groupRun, req SaveRequest, j int, cached bool) (GroupResult, groupStep, bool) {
	if p := g.find(req.SaveID); p != nil {
		r, step := e.repeatInGroup(s, req, *p)
		if step == stepDuplicate {
			g.repeats = append(g.repeats, j) // told the entry's failure if it is not written (runOnce)
		}
		return r, step, true
	}
	rec, ok, err := e.savedBefore(ctx, s, req.SaveID)
	if err != nil {
		return GroupResult{Err: err}, stepRefused, true
	}
	if ok && cached && !g.checked {
		if err := e.checkCached(ctx, s); err != nil {
			return GroupResult{Err: err}, stepRefused, true
		}
		g.checked = true
	}
	if !ok || req.Import != nil && (rec.Version != req.Import.Version || rec.Hash != req.Import.Hash) {
		return GroupResult{}, 0, false
	}
	unverified, err := e.checkRepeat(ctx, s, req, rec)
	if err != nil {
		return GroupResult{Err: err}, stepRefused, true
	}
	return GroupResult{Saved: Saved{Record: rec, Duplicate: true, Unverified: unverified}}, stepDuplicate, true
}

// planReads reports whether planning req against head h would read the head's messages (a whole
// array that does not extend the head in canonical form: compared message by message, a
// rewrite). Within a group, a head the pending saves make is not stored yet: such a save starts
// the next entry, after they are written.
func planReads(h headState, req SaveRequest) bool {
	if req.Base != nil || h.Counts.Messages == 0 {
		return false
	}
	_, ok := canonicalTail(h, req.Payload)
	return !ok
}

// groupMetaBytes bounds what save req, planned as p, adds to a group entry's meta: its record
// (numbers, hash, free text, extras; a fork's ids escaped in JSON at worst 6 bytes a byte) and its
// piece (each large string a value listed: at, size, id).
func groupMetaBytes(req SaveRequest, p savePlan) int64 {
	n := 512 + len(req.SaveID) + len(req.Writer) + len(req.Reason) + len(req.Limits.Dialect) + 64*len(p.large)
	if f := req.ForkOf; f != nil {
		n += 6 * (len(f.Key.Namespace) + len(f.Key.Session) + len(f.Key.Agent))
	}
	return int64(n)
}

// find returns the pending save of save id id, nil if none.
func (g *groupRun) find(id string) *pendingSave {
	for i := range g.pending {
		if g.pending[i].req.SaveID == id {
			return &g.pending[i]
		}
	}
	return nil
}

// repeatInGroup answers a save whose save id a save before it in the same group has: the same
// save sent twice (the same bytes on the same base) is a duplicate of that version; other bytes
// under the same save id are refused (ErrSaveIDReused), as Save refuses them.
func (e *Engine) repeatInGroup(s *session, req SaveRequest, p pendingSave) (GroupResult, groupStep) {
	rec, err := recordOf(s.key, p.next)
	if err != nil {
		return GroupResult{Err: err}, stepRefused
	}
	same := bytes.Equal(req.Payload, p.req.Payload) && sameVersion(req.Base, p.req.Base) && req.Import == nil && p.req.Import == nil
	if !same {
		return GroupResult{Err: &SaveIDReusedError{Key: req.Key, SaveID: req.SaveID, Version: rec.Version, Hash: rec.Hash,
			Detail: "an earlier save of the same group has this save id and other bytes or another base"}}, stepRefused
	}
	return GroupResult{Saved: Saved{Record: rec, Duplicate: true}}, stepDuplicate
}

func sameVersion(a, b *uint64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

// commitGroup writes the pending saves (s.mu held): one alone as Save writes it (commitHead), more
// as one group entry. It returns their Saved, in order.
func (e *Engine) commitGroup(ctx context.Context, s *session, pend []pendingSave) ([]Saved, error) {
	if len(pend) == 1 {
		p := pend[0]
		saved, err := e.commitHead(ctx, s, p.next, p.plan, p.raw, nil)
		return []Saved{saved}, err
	}
	pieces := make([]pieceInfo, len(pend))
	rawBytes := 0
	for _, p := range pend {
		rawBytes += len(p.raw)
	}
	all := groupBuffers.Get(rawBytes) // the saves' pieces back to back: compressed at once (values out: no more)
	defer groupBuffers.Put(all)       // compress copies it into the encoder's history; the entry holds none of it
	added := make([]int64, len(pend))
	var deadline time.Time
	for i, p := range pend {
		stripped, vals, add, dl, err := e.storeValues(ctx, s.key.Namespace, p.raw, p.plan.largeStrings(p.raw))
		if err != nil {
			return nil, err
		}
		if !dl.IsZero() && (deadline.IsZero() || dl.Before(deadline)) {
			deadline = dl
		}
		pieces[i] = pieceInfo{Messages: p.plan.messages, RawBytes: int64(len(stripped)), CRC: crc32.Checksum(stripped, castagnoli), Values: vals}
		if p.plan.rewrite {
			keep := p.plan.keepBytes
			pieces[i].Keep = &keep
		}
		added[i] = add
		all = append(all, stripped...)
	}
	var run pieceInfo
	data, err := e.compress(s, &run, all, true)
	if err != nil {
		return nil, err
	}
	if run.Frame { // the run starts a frame at its first piece that adds bytes
		for i := range pieces {
			if pieces[i].RawBytes > 0 {
				pieces[i].Frame = true
				break
			}
		}
	}
	m, err := groupEntry(s, pend, pieces, added, int64(len(data)), int64(len(all)))
	if err != nil {
		s.enc = nil
		return nil, err
	}
	size, err := s.encodedSize(m, data)
	if err == nil {
		m.Head.TailBytes += max(size, int64(len(all))/rawPerTailByte)
		_, err = e.writeBy(ctx, s, m, data, deadline)
	}
	if err != nil {
		s.enc = nil // it has compressed the pieces; the stored stream has not
		return nil, err
	}
	out := make([]Saved, len(pend))
	for i := range pend {
		var rec Record
		if i < len(m.Group) {
			rec = m.Group[i].Record
			rec.Key = s.key
		} else if rec, err = recordOf(s.key, m.Head); err != nil {
			return nil, err
		}
		s.recent.add(rec)
		out[i] = Saved{Record: rec}
	}
	out[len(out)-1].PackDue = e.packDue(m.Head)
	return out, nil
}

// groupBuffers holds the buffers commitGroup joins a group's pieces in, for the next group: a
// group of a burst is up to maxGroupBytes (~250 KB for 54 of the corpus's pairs, what the ingest
// benchmark's agents send). One larger than a group may hold is not kept.
var groupBuffers = bufpool.Pool{Min: 64 << 10, Max: 2 * maxGroupBytes}

// groupEntry is the entry of a group of pending saves whose pieces are pieces: its head the last
// save's head, the saves before it its Group; each version's stored bytes its share (by raw
// bytes) of the entry's data, plus its values. The tail counters are the entry's: one entry more
// after the session's last, holding len(pend)-1 versions beyond one (TailExtra).
func groupEntry(s *session, pend []pendingSave, pieces []pieceInfo, added []int64, stored, raw int64) (entryMeta, error) {
	share := func(i int) int64 {
		if raw == 0 {
			return 0
		}
		return stored * pieces[i].RawBytes / raw
	}
	group := make([]packedVersion, len(pend)-1)
	left := stored
	for i := range group {
		h := pend[i].next
		h.StoredBytes = share(i) + added[i]
		left -= share(i)
		rec, err := recordOf(Key{}, h)
		if err != nil {
			return entryMeta{}, err
		}
		group[i] = packedVersion{Record: rec, Piece: pieces[i]}
	}
	last := len(pend) - 1
	head := pend[last].next
	head.StoredBytes = left + added[last]
	before := s.last.Head // the head as stored (the pending saves' heads count their tails as if each were an entry)
	head.Pack, head.Deleted = s.lastPack(), s.lastDeleted()
	head.TailEntries, head.TailBytes, head.TailExtra = before.TailEntries+1, before.TailBytes, before.TailExtra+len(group)
	if s.last.Kind == kindPack {
		head.TailEntries, head.TailBytes, head.TailExtra = 1, 0, len(group)
	}
	return entryMeta{Kind: kindSave, Head: head, Piece: &pieces[last], Group: group}, nil
}

// appendGroup writes a group entry's earlier versions (entryMeta.Group) as a pack writes its
// records (appendPacked: delta-coded, with their pieces); they must end right below the head
// version head.
//
// Then each version's piece's message count (a varint each; a pack does not keep them): how many
// messages its save appended, which a repeat of its save id is checked against (repeat.go).
func appendGroup(out []byte, group []packedVersion, head uint64) ([]byte, error) {
	if v := group[len(group)-1].Record.Version; v+1 != head {
		return nil, fmt.Errorf("engine: a group ending at version %d in an entry of version %d", v, head)
	}
	out, err := appendPacked(out, group)
	if err != nil {
		return nil, err
	}
	for _, p := range group {
		out = binary.AppendUvarint(out, uint64(p.Piece.Messages))
	}
	return out, nil
}

// group reads a group entry's earlier versions (appendGroup) for an entry of head version head.
func (r *reader) group(head uint64) []packedVersion {
	g := r.packed(true)
	switch {
	case r.err != nil:
		return nil
	case len(g) == 0 || len(g) >= maxGroup:
		r.fail("a group of %d versions", len(g))
	case g[len(g)-1].Record.Version+1 != head:
		r.fail("a group ending at version %d in an entry of version %d", g[len(g)-1].Record.Version, head)
	}
	for i := range g {
		g[i].Piece.Messages = int(r.uint("group piece messages", maxCount))
	}
	return g
}

// entryVersions returns the versions a save or pack entry holds, oldest first, with their
// records (Key not set) and pieces: a pack's packed versions, a save's group then its head. Nil
// for other kinds.
func entryVersions(x ent) ([]packedVersion, error) {
	switch x.meta.Kind {
	case kindPack:
		return x.meta.Packed, nil
	case kindSave:
		rec, err := recordOf(Key{}, x.meta.Head)
		if err != nil {
			return nil, err
		}
		return append(x.meta.Group[:len(x.meta.Group):len(x.meta.Group)], packedVersion{Record: rec, Piece: *x.meta.Piece}), nil
	}
	return nil, nil
}

// saveStartsFrame reports whether a save entry's data starts a zstd frame: its piece's, or in a
// group entry its first piece that adds bytes.
func saveStartsFrame(m entryMeta) bool {
	if len(m.Group) == 0 {
		return m.Piece.Frame
	}
	for _, p := range m.Group {
		if p.Piece.RawBytes > 0 || p.Piece.Frame {
			return p.Piece.Frame
		}
	}
	return m.Piece.Frame
}

// savePiece returns the piece of version v in save entry m (its head's, or in a group entry the
// one of its versions), nil if m is not a save holding v.
func savePiece(m entryMeta, v uint64) *pieceInfo {
	switch {
	case m.Kind != kindSave || m.Piece == nil || v > m.Head.Version || v < firstVersion(m):
		return nil
	case v == m.Head.Version:
		return m.Piece
	}
	return &m.Group[v-m.Group[0].Record.Version].Piece
}

// firstVersion is the first version a save entry holds: its group's first, or its head version.
func firstVersion(m entryMeta) uint64 {
	if len(m.Group) > 0 {
		return m.Group[0].Record.Version
	}
	return m.Head.Version
}

// groupPieces returns a group entry's pieces (its group's then its head's) and their data as
// runs of saves take them (decodeRuns, joinStored, logBuilder): the entry's data on its first
// piece that adds bytes, nil on the others, which continue its run.
func groupPieces(m entryMeta, data []byte) ([]*pieceInfo, [][]byte) {
	ps := make([]*pieceInfo, 0, len(m.Group)+1)
	for i := range m.Group {
		ps = append(ps, &m.Group[i].Piece)
	}
	ps = append(ps, m.Piece)
	ds := make([][]byte, len(ps))
	for i, p := range ps {
		if p.RawBytes > 0 || p.Frame {
			ds[i] = data
			break
		}
	}
	return ps, ds
}
