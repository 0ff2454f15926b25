package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
)

// Packs bound what a read fetches (docs/format.md §8.7): every entry costs a read ~10 µs however
// small, so the saves since the last pack are joined into one pack entry once their data reaches
// PackBytes (meta included) or they are PackEntries entries. A pack holds their records and their messages,
// compressed again as one zstd frame (or, with PackOpen or for a tail written in groups, as they
// were stored: writtenInGroups); it is appended with the compare-and-swap of a save (it carries
// the head, so it is the head until the next save), and the entries it packed are then deleted.
// Each stored byte is thus written at most twice.
//
// A pack is safe with several engines on one log: it is decided from what it read, and its
// append expects the last entry it read. A save (or another engine's pack) that came in between
// makes the append fail: nothing was written, nothing is undone, and the next pack does it. A
// crash between the append and the deletes leaves packed entries that readers skip and the next
// pack deletes.

// PackResult says what a pack did (zero: nothing due, or another writer came first).
type PackResult struct {
	Entries int // entries packed or deleted
	Bytes   int // data bytes written
	Seq     uint64
}

// Pack packs key's entries since its last pack if they are due (Saved.PackDue); force packs them
// whatever their number. The caller runs it after answering a save, or when the session is idle.
func (e *Engine) Pack(ctx context.Context, key Key, force bool) (PackResult, error) {
	for attempt := 0; ; attempt++ {
		s := e.session(key)
		res, err := e.packOnce(ctx, s, force)
		if errors.Is(err, ErrConflict) || errors.Is(err, errShort) && e.stale(ctx, s) {
			e.forget(s) // another writer came first: nothing was written, the next pack does it
			return PackResult{}, nil
		}
		// A short read of a log that did not move is not a race: entries are missing (the
		// error says so, ErrCorrupt), and hiding it would leave the session unpacked for good.
		if err != nil && attempt == 0 && e.again(ctx, s, err) {
			continue // decided on a cached head another daemon moved past (a deletion, say)
		}
		if err == nil && res == (PackResult{}) && force && attempt == 0 && e.stale(ctx, s) {
			// Nothing to pack by the cached head, but the caller needs the log packed (a fork
			// copied in before its source goes, say): look at the log itself.
			e.forget(s)
			continue
		}
		if err != nil {
			e.forget(s)
		}
		return res, err
	}
}

func (e *Engine) packOnce(ctx context.Context, s *session, force bool) (PackResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := e.load(ctx, s); err != nil {
		return PackResult{}, err
	}
	if !e.packWanted(s.last, force) {
		return PackResult{}, nil
	}
	return e.pack(ctx, s)
}

// packWanted says whether a session whose last entry is last is to be packed now.
func (e *Engine) packWanted(last entryMeta, force bool) bool {
	switch {
	case last.Kind == kindPack:
		return false // nothing since the last pack
	case last.Kind == kindFork:
		return true // a fork's first entry is packed at once, NoPack or not: it copies its source in
	case force:
		return last.Head.TailEntries >= 1 || e.packDue(last.Head)
	}
	return e.packDue(last.Head) // false with NoPack
}

func (e *Engine) pack(ctx context.Context, s *session) (PackResult, error) {
	t, err := e.readTail(ctx, s)
	if err != nil {
		return PackResult{}, err
	}
	c, err := e.collect(ctx, s.key, t.live)
	if err != nil {
		return PackResult{}, err
	}
	if len(c.packed) == 0 {
		return e.packState(ctx, s, t.dead)
	}
	// A copied-in source is compressed with the rest. Saves that continue an open pack's frame
	// (written after an open pack) cannot be decoded on their own: they stay as they are, in an
	// open pack too. A tail written in groups is joined as it is stored (writtenInGroups).
	open := (e.cfg.PackOpen || continuesFrame(c.pieces, c.datas) || writtenInGroups(t.live)) && c.source == nil
	data, err := e.packData(c.packed, c.pieces, c.datas, c.prefix, open)
	if err != nil {
		return PackResult{}, fmt.Errorf("session %s: packing: %w", s.key, err)
	}
	m := entryMeta{Kind: kindPack, Head: s.last.Head, Packed: c.packed, Open: open}
	m.Head.Pack, m.Head.TailEntries, m.Head.TailBytes, m.Head.TailExtra, m.Head.Deleted = t.prev, 0, 0, 0, s.lastDeleted()
	seq, err := e.write(ctx, s, m, data)
	if err != nil {
		return PackResult{}, err
	}
	e.packed(s, m)
	res := PackResult{Entries: len(t.dead), Bytes: len(data), Seq: seq}
	if e.crashBeforeDeletes {
		return res, nil
	}
	if err := e.log.Delete(ctx, s.key, t.dead...); err != nil {
		return res, err
	}
	if c.source != nil {
		// The fork holds its copy now: its source may go. (A crash before this leaves a stale
		// pin, dropped when the source's retention or deletion looks at it.)
		return res, e.unpin(ctx, c.source.Fork, forkPin{Fork: s.key, Version: c.source.Version})
	}
	return res, nil
}

// packState packs a tail without a version (lease renewals, parts of a save that failed or is
// still being written): nothing reads its entries but the last, which holds the head. It first
// appends a state entry holding the head with the tail counters reset, with the compare-and-swap
// of any write, and only then deletes the entries before it: a save being written in parts right
// then finds the log moved on when it commits (a conflict, and it writes again), instead of
// committing after parts the pack deleted (docs/format.md §8.3.1).
func (e *Engine) packState(ctx context.Context, s *session, dead []uint64) (PackResult, error) {
	if len(slices.DeleteFunc(slices.Clone(dead), func(seq uint64) bool { return seq == s.lastSeq })) == 0 {
		return PackResult{}, nil // the last entry alone: nothing to gain
	}
	m := entryMeta{Kind: kindState, Head: s.last.Head}
	m.Head.Pack, m.Head.Deleted, m.Head.TailEntries, m.Head.TailBytes, m.Head.TailExtra = s.lastPack(), s.lastDeleted(), 0, 0, 0
	seq, err := e.write(ctx, s, m, nil)
	if err != nil {
		return PackResult{}, err
	}
	res := PackResult{Entries: len(dead), Seq: seq}
	if e.crashBeforeDeletes {
		return res, nil
	}
	return res, e.log.Delete(ctx, s.key, dead...)
}

// tail is what a pack reads: the previous pack's sequence, the live entries after it, and every
// entry to delete once the pack is committed.
type tail struct {
	prev uint64
	live []ent
	dead []uint64
}

// readTail reads the session's entries from the pack before the previous one: entries the
// previous pack covered but a crash kept from deleting are deleted now (skipped, not packed
// again), as are entries before a deletion.
func (e *Engine) readTail(ctx context.Context, s *session) (tail, error) {
	t := tail{prev: s.lastPack()}
	from, prevParts := uint64(0), 0
	if t.prev != 0 {
		en, err := e.log.Get(ctx, s.key, t.prev)
		if err != nil {
			return t, err
		}
		m, _, err := decodeEntry(en.Data)
		if err != nil {
			return t, fmt.Errorf("session %s entry %d: %w", s.key, t.prev, err)
		}
		from, prevParts = m.Head.Pack+1, m.Parts
	}
	var all []Entry
	err := e.log.Range(ctx, s.key, from, s.lastSeq, func(en Entry) bool {
		all = append(all, en)
		return true
	})
	if err != nil {
		return t, err
	}
	if len(all) == 0 || all[len(all)-1].Seq != s.lastSeq {
		return t, errShort
	}
	// prev's own parts are the entries right before it: they stay with it.
	keep := map[uint64]bool{t.prev: true}
	for i := len(all) - 1; i >= 0 && prevParts > 0; i-- {
		if all[i].Seq < t.prev {
			keep[all[i].Seq] = true
			prevParts--
		}
	}
	var raw []ent
	since := s.lastDeleted()
	for _, en := range all {
		if keep[en.Seq] {
			continue
		}
		t.dead = append(t.dead, en.Seq)
		if en.Seq < t.prev || en.Seq < since {
			continue
		}
		m, data, err := decodeEntry(en.Data)
		if err != nil {
			return t, fmt.Errorf("session %s entry %d: %w", s.key, en.Seq, err)
		}
		raw = append(raw, ent{seq: en.Seq, meta: m, data: data})
	}
	t.live, err = resolve(s.key, raw, true)
	return t, err
}

// collected is what a pack holds: its versions, the saves' pieces and stored data, and, when the
// tail starts with a fork entry, the source's version copied in.
type collected struct {
	packed []packedVersion
	pieces []*pieceInfo
	datas  [][]byte
	prefix []byte
	source *forkPin
}

// collect gathers the versions of the live tail.
func (e *Engine) collect(ctx context.Context, key Key, live []ent) (collected, error) {
	var c collected
	for i, x := range live {
		switch x.meta.Kind {
		case kindFork:
			if i != 0 {
				return c, fmt.Errorf("session %s entry %d: %w: a fork entry after the first", key, x.seq, ErrCorrupt)
			}
			prefix, err := e.forkSource(ctx, key, x, 0)
			if err != nil {
				return c, err
			}
			rec, err := recordOf(Key{}, x.meta.Head)
			if err != nil {
				return c, err
			}
			c.packed = append(c.packed, packedVersion{Record: rec, Piece: pieceInfo{Messages: x.meta.Head.Counts.Messages,
				RawBytes: int64(len(prefix)), CRC: crc32.Checksum(prefix, castagnoli), Frame: true}})
			c.prefix, c.source = prefix, x.meta.Source
		case kindSave:
			versions, err := entryVersions(x) // a group entry's versions, or the save's one
			if err != nil {
				return c, err
			}
			c.packed = append(c.packed, versions...)
			ps, ds := groupPieces(x.meta, x.data)
			c.pieces, c.datas = append(c.pieces, ps...), append(c.datas, ds...)
		case kindPack:
			return c, fmt.Errorf("session %s entry %d: %w: a pack after the last pack", key, x.seq, ErrCorrupt)
		}
	}
	return c, nil
}

// writtenInGroups reports whether at least three quarters of a tail's versions are in group
// entries (SaveGroup): such a tail is packed open, its stored bytes joined as they are, never
// decoded nor compressed again (docs/format.md §8.15s). Saves arrive in groups when a session
// saves faster than its entries are written, bound by CPU; the pack's decoding and its
// recompression at SpeedBetterCompression were then ~70 % of the daemon's CPU after a burst of
// 50 agents (~40 µs a save), for a tail ~8 % smaller on disk. A tail mostly of single saves (a
// session saved turn by turn: the disk target) is recompressed as before.
func writtenInGroups(live []ent) bool {
	grouped, all := 0, 0
	for _, x := range live {
		if x.meta.Kind != kindSave {
			continue
		}
		n := len(x.meta.Group) + 1
		all += n
		if len(x.meta.Group) > 0 {
			grouped += n
		}
	}
	return all > 0 && 4*grouped >= 3*all
}

// continuesFrame reports whether the first saves that add bytes continue a frame begun before
// them (an open pack's), instead of starting one.
func continuesFrame(pieces []*pieceInfo, datas [][]byte) bool {
	for i, p := range pieces {
		if !empty(p, datas[i]) {
			return !p.Frame
		}
	}
	return false
}

// packed updates the session's cache after its pack m was committed.
func (e *Engine) packed(s *session, m entryMeta) {
	if !m.Open {
		s.dropEncoder() // the next save starts a new frame: the pack replaced the frames it continued
	}
	if s.recent.ok {
		s.recent.reset(true)
		for _, p := range m.Packed {
			r := p.Record
			r.Key = s.key
			s.recent.add(r)
		}
	}
}

// packData is a pack's data. By default the packed saves are decoded and compressed again as one
// zstd frame (a stream cut at every save decodes 1.3–1.7× slower than the same bytes compressed
// at once); the pieces keep their sizes and Keep, and only the first starts a frame. With
// PackOpen, their stored bytes as they are.
func (e *Engine) packData(packed []packedVersion, pieces []*pieceInfo, datas [][]byte, prefix []byte, open bool) ([]byte, error) {
	if open {
		return joinStored(pieces, datas), nil
	}
	// The fork's prefix first, then the saves decoded after it, in one buffer (its capacity cut:
	// the first append copies it, the caller's bytes are never written).
	plain, err := decodeRuns(prefix[:len(prefix):len(prefix)], pieces, datas)
	if err != nil {
		return nil, err
	}
	for i := range packed {
		packed[i].Piece.Frame = i == 0
	}
	return compressPack(plain), nil
}
