package engine

import (
	"context"
	"errors"
	"fmt"
)

// Packs bound what a read fetches (docs/format.md §8.7): every entry costs a read ~10 µs however
// small, so the saves since the last pack are joined into one pack entry once their data reaches
// PackBytes or they are PackEntries entries. A pack holds their records and their messages,
// compressed again as one zstd frame (or, PackOpen, as they were stored); it is appended with the
// compare-and-swap of a save (it carries the head, so it is the head until the next save), and the
// entries it packed are then deleted. Each stored byte is thus written at most twice.
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

// Pack packs key's entries since its last pack if they are due (Saved.PackDue); force packs any
// run of two or more. The caller runs it after answering a save, or when the session is idle.
func (e *Engine) Pack(ctx context.Context, key Key, force bool) (PackResult, error) {
	s := e.session(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := e.load(ctx, s); err != nil {
		return PackResult{}, err
	}
	h := s.last.Head
	due := s.last.Kind != KindPack && (e.packDue(h) || force && h.TailEntries >= 2)
	if e.cfg.NoPack || !due {
		return PackResult{}, nil
	}
	res, err := e.pack(ctx, s)
	if errors.Is(err, ErrConflict) || errors.Is(err, errShort) {
		e.forget(s) // another writer came first: its next use reads the log again
		return PackResult{}, nil
	}
	if err != nil {
		e.forget(s)
	}
	return res, err
}

func (e *Engine) pack(ctx context.Context, s *session) (PackResult, error) {
	// Read from the pack before the previous one: entries the previous pack covered but a crash
	// kept from deleting are deleted now (they are skipped, not packed again).
	prev, from, prevParts := s.lastPack(), uint64(0), 0
	if prev != 0 {
		en, err := e.log.Get(ctx, s.key, prev)
		if err != nil {
			return PackResult{}, err
		}
		m, _, err := decodeEntry(en.Data)
		if err != nil {
			return PackResult{}, fmt.Errorf("session %s entry %d: %w", s.key, prev, err)
		}
		from, prevParts = m.Head.Pack+1, m.Parts
	}
	var all []ent
	err := e.log.Range(ctx, s.key, from, s.lastSeq, func(en Entry) bool {
		all = append(all, ent{seq: en.Seq, data: en.Data})
		return true
	})
	if err != nil {
		return PackResult{}, err
	}
	if len(all) == 0 || all[len(all)-1].seq != s.lastSeq {
		return PackResult{}, errShort
	}
	// prev's own parts are the entries right before it: they stay with it.
	keep := map[uint64]bool{prev: true}
	for i := len(all) - 1; i >= 0 && prevParts > 0; i-- {
		if all[i].seq < prev {
			keep[all[i].seq] = true
			prevParts--
		}
	}
	var raw []ent
	var dead []uint64 // every entry to delete once the pack is committed
	since := s.lastDeleted()
	for _, x := range all {
		if keep[x.seq] {
			continue
		}
		dead = append(dead, x.seq)
		if x.seq < prev || x.seq < since {
			continue // covered by prev, or before a deletion, left by a crash: deleted, not packed
		}
		m, data, err := decodeEntry(x.data)
		if err != nil {
			return PackResult{}, fmt.Errorf("session %s entry %d: %w", s.key, x.seq, err)
		}
		raw = append(raw, ent{seq: x.seq, meta: m, data: data})
	}
	live, err := resolve(s.key, raw, true)
	if err != nil {
		return PackResult{}, err
	}
	var packed []Packed
	var pieces []*Piece
	var datas [][]byte
	for _, x := range live {
		switch x.meta.Kind {
		case KindSave:
			rec, err := recordOf(s.key, x.meta.Head)
			if err != nil {
				return PackResult{}, err
			}
			rec.Key = Key{}
			packed = append(packed, Packed{Record: rec, Piece: *x.meta.Piece})
			pieces, datas = append(pieces, x.meta.Piece), append(datas, x.data)
		case KindPack:
			return PackResult{}, fmt.Errorf("session %s entry %d: %w: a pack after the last pack", s.key, x.seq, ErrCorrupt)
		}
	}
	if len(packed) == 0 {
		return PackResult{}, nil // only leases: left for the next pack
	}
	data, err := e.packData(packed, pieces, datas)
	if err != nil {
		return PackResult{}, fmt.Errorf("session %s: packing: %w", s.key, err)
	}
	m := Meta{Kind: KindPack, Head: s.last.Head, Packed: packed, Open: e.cfg.PackOpen}
	m.Head.Pack, m.Head.TailEntries, m.Head.TailBytes, m.Head.Deleted = prev, 0, 0, since
	seq, err := e.write(ctx, s, m, data)
	if err != nil {
		return PackResult{}, err
	}
	if !m.Open {
		s.enc = nil // the next save starts a new frame: the pack replaced the frames it continued
	}
	if s.recentOK {
		s.recent = nil
		for _, p := range packed {
			r := p.Record
			r.Key = s.key
			s.recent = append(s.recent, r)
		}
	}
	res := PackResult{Entries: len(dead), Bytes: len(data), Seq: seq}
	if e.crashBeforeDeletes {
		return res, nil
	}
	return res, e.log.Delete(ctx, s.key, dead...)
}

// packData is a pack's data. By default the packed saves are decoded and compressed again as one
// zstd frame (a stream cut at every save decodes 1.3–1.7× slower than the same bytes compressed
// at once); the pieces keep their sizes and Keep, and only the first starts a frame. With
// PackOpen, their stored bytes as they are.
func (e *Engine) packData(packed []Packed, pieces []*Piece, datas [][]byte) ([]byte, error) {
	if e.cfg.PackOpen {
		return joinStored(pieces, datas), nil
	}
	plain, err := decodeRuns(pieces, datas)
	if err != nil {
		return nil, err
	}
	for i := range packed {
		packed[i].Piece.Frame = i == 0
	}
	return compressFrame(plain), nil
}
