package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/checkpointd/checkpointd/internal/pieces"
)

// ent is one entry of a log, decoded.
type ent struct {
	seq  uint64 // 0: not known (read by DataReader)
	meta entryMeta
	data []byte
	raw  []byte // the entry as stored, when last read it (the log's last entry)
}

// errShort reports a read that did not see every entry it should have (a pack deleted some under
// it, or a replica lags); the read starts again. One that stays short after maxReadAttempts is
// reported as it is: entries are missing (ErrCorrupt).
var errShort = fmt.Errorf("%w: the log changed under the read, or lost entries", ErrCorrupt)

// entries returns key's live entries up to sequence upTo in order, stopping after the first one
// for which stop returns true (stop may be nil): parts joined to the save or pack they belong to,
// and entries a later pack covers, uncommitted parts and everything before a deletion dropped.
func (e *Engine) entries(ctx context.Context, key Key, from, upTo uint64, stop func(ent) bool) ([]ent, error) {
	return e.read1(ctx, key, from, upTo, stop, true)
}

// entriesFor is entries without stop; needData false keeps entries whose parts were not read.
func (e *Engine) entriesFor(ctx context.Context, key Key, from, upTo uint64, needData bool) ([]ent, error) {
	return e.read1(ctx, key, from, upTo, nil, needData)
}

func (e *Engine) read1(ctx context.Context, key Key, from, upTo uint64, stop func(ent) bool, needData bool) ([]ent, error) {
	raw, stopped, err := e.rangeDecodedKeeping(ctx, key, from, upTo, stop, nil, needData)
	if err != nil {
		return nil, err
	}
	if stopped && !gapless(raw, from) && lastSeqOf(raw) < upTo {
		// Entries before the one we stopped at are gone: a pack after it may cover them all
		// (it deleted what it packed). Read on to the end, and let the pack answer.
		if raw, _, err = e.rangeDecodedKeeping(ctx, key, lastSeqOf(raw)+1, upTo, nil, raw, needData); err != nil {
			return nil, err
		}
		stopped = false
	}
	if !stopped && (len(raw) == 0 || raw[len(raw)-1].seq != upTo) {
		return nil, fmt.Errorf("session %s: read up to entry %d, not %d: %w", key, lastSeqOf(raw), upTo, errShort)
	}
	if !gapless(raw, from) {
		return nil, fmt.Errorf("session %s: entries missing between %d and %d: %w", key, from, lastSeqOf(raw), errShort)
	}
	return resolve(key, raw, needData)
}

// gapless reports whether raw, a read's entries from sequence from on, holds every entry the
// read needs. Entries vanish under a read when a pack or a deletion on another daemon deletes
// what it covers (engine.Log's Range may skip them): coming up with the last entry proves
// nothing about the middle. Each entry's head tells what must come before it, going back from
// the last one got: the entries since the last pack are counted (TailEntries: 1 after the pack,
// a deletion or a state-only pack, whose count is 0; parts do not count and carry the count of
// the entry before them), so each one's predecessor must be there with the count one less; the
// first one's, and each pack's, is the pack it names (Head.Pack), down to the read's start.
func gapless(raw []ent, from uint64) bool {
	i := len(raw) - 1
	for i >= 0 {
		x := raw[i]
		h := x.meta.Head
		want := h.TailEntries // the count of the non-part entry before x
		if x.meta.Kind != kindPart {
			want--
		}
		if x.meta.Kind == kindPack || want <= 0 {
			// x starts the count, or comes first after the last pack: that pack comes next.
			if h.Pack == 0 || h.Pack < from {
				return true
			}
			if h.Pack >= x.seq {
				return false // a corrupt head
			}
			for i >= 0 && raw[i].seq > h.Pack {
				i--
			}
			if i < 0 || raw[i].seq != h.Pack {
				return false
			}
			continue
		}
		for i--; i >= 0 && raw[i].meta.Kind == kindPart; i-- {
		}
		if i < 0 || raw[i].meta.Kind == kindPack || raw[i].meta.Head.TailEntries != want || raw[i].meta.Head.Pack != h.Pack {
			return false
		}
	}
	return false
}

// rangeDecoded appends key's entries in [from, upTo] to raw, decoded, stopping after the first
// for which stop returns true (stop may be nil), and says whether it stopped.
func (e *Engine) rangeDecoded(ctx context.Context, key Key, from, upTo uint64, stop func(ent) bool, raw []ent) ([]ent, bool, error) {
	return e.rangeDecodedKeeping(ctx, key, from, upTo, stop, raw, true)
}

// rangeDecodedKeeping is rangeDecoded; without keepData the entries are kept without their data
// (their metadata is all the caller wants: records, pieces, heads), so the read holds one entry's
// bytes at a time, not the whole range's. The save-id lookup (tailRecords, once per session load)
// reads the last pack and the saves after it this way: outside the ingest budget, but bounded by
// the metadata of at most about 512 versions (docs/format.md §8.7) plus one entry.
func (e *Engine) rangeDecodedKeeping(ctx context.Context, key Key, from, upTo uint64, stop func(ent) bool, raw []ent, keepData bool) ([]ent, bool, error) {
	var derr error
	stopped := false
	err := e.log.Range(ctx, key, from, upTo, func(en Entry) bool {
		m, data, err := decodeEntry(en.Data)
		if err != nil {
			derr = fmt.Errorf("session %s entry %d: %w", key, en.Seq, err)
			return false
		}
		x := ent{seq: en.Seq, meta: m, data: data}
		if !keepData {
			x.data = nil
		}
		raw = append(raw, x)
		if stop != nil && stop(x) {
			stopped = true
			return false
		}
		return true
	})
	if err == nil {
		err = derr
	}
	return raw, stopped, err
}

// joinParts joins the data of an entry's parts, in log order, and its own (the last bytes):
// pieces numbered by their place (docs/format.md §8, internal/pieces). Parts are written full and
// never empty, so an empty one is a corrupt log (ErrCorrupt), as a piece refused is.
func joinParts(parts []ent, tail []byte) ([]byte, error) {
	ps := make([][]byte, 0, len(parts)+1)
	for _, p := range parts {
		ps = append(ps, p.data)
	}
	data, err := pieces.Join(append(ps, tail), 0)
	if err != nil {
		return nil, fmt.Errorf("%w: parts: %w", ErrCorrupt, err)
	}
	return data, nil
}

func lastSeqOf(es []ent) uint64 {
	if len(es) == 0 {
		return 0
	}
	return es[len(es)-1].seq
}

// resolve joins parts to their save or pack, drops parts nothing took and state entries, restarts
// at a deletion (a state entry of version 0), and drops what a pack covers (a crash between a pack's commit and
// its deletes leaves them: a pack covers every entry between the pack before it and itself).
// Without needData, the entries were read without their data (rangeDecodedKeeping) and a save or
// pack is kept without it, its parts read or not: its records are all the caller wants.
func resolve(key Key, raw []ent, needData bool) ([]ent, error) {
	var out []ent
	var parts []ent
	for _, x := range raw {
		switch {
		case x.meta.Kind == kindPart:
			parts = append(parts, x)
			continue
		case x.meta.Parts > 0:
			if !needData {
				x.data = nil
				break
			}
			if len(parts) < x.meta.Parts {
				return nil, fmt.Errorf("session %s entry %d: %w: it has %d parts, %d came before it", key, x.seq, errShort, x.meta.Parts, len(parts))
			}
			data, err := joinParts(parts[len(parts)-x.meta.Parts:], x.data)
			if err != nil {
				return nil, fmt.Errorf("session %s entry %d: %w", key, x.seq, err)
			}
			x.data = data
		case x.meta.Deletion:
			out = out[:0] // the session was deleted here: what came before is not its
		}
		parts = parts[:0]
		if x.meta.Kind == kindState {
			// A lease, seal, retention or deletion: nothing to read in it (the head it holds is the
			// last entry's business). Leaving it out keeps a fork's entry first in its live log
			// when the session was deleted, or leased, before the fork (fork.go relies on it).
			continue
		}
		if x.meta.Kind == kindPack {
			// Everything after the pack before it is in it (or was dead already: a deletion's
			// leftovers), whatever its kind.
			for len(out) > 0 && out[len(out)-1].seq > x.meta.Head.Pack {
				out = out[:len(out)-1]
			}
		}
		out = append(out, x)
	}
	return out, nil
}

// entriesHolding returns key's live entries up to the one holding version v. The read stops at
// the first save or pack holding v (one a pack covers but a crash left holds the same bytes), and
// never at a fork entry: a pack may have copied its source in, and the source be gone.
func (e *Engine) entriesHolding(ctx context.Context, key Key, from, upTo, v uint64) ([]ent, error) {
	entries, err := e.entries(ctx, key, from, upTo, func(x ent) bool { return x.meta.Kind != kindFork && holds(v)(x) })
	if err != nil {
		return nil, err
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if holds(v)(entries[i]) {
			return entries[:i+1], nil
		}
	}
	// The head names v, so its entry must be there: a deletion or retention moved under us.
	return nil, fmt.Errorf("session %s version %d: %w", key, v, errShort)
}

// holds returns whether an entry holds version v's data.
func holds(v uint64) func(ent) bool {
	return func(x ent) bool {
		switch x.meta.Kind {
		case kindSave:
			return firstVersion(x.meta) <= v && v <= x.meta.Head.Version // a group's versions too
		case kindFork:
			return x.meta.Head.Version == v
		case kindPack:
			p := x.meta.Packed
			return p[0].Record.Version <= v && v <= p[len(p)-1].Record.Version
		}
		return false
	}
}

// recordIn returns version v's record from the entry holding it, and its index in a pack or a
// group entry (entryVersions).
func recordIn(key Key, x ent, v uint64) (Record, int, error) {
	if x.meta.Kind == kindPack {
		i := int(v - x.meta.Packed[0].Record.Version)
		r := x.meta.Packed[i].Record
		r.Key = key
		return r, i, nil
	}
	if g := x.meta.Group; len(g) > 0 && v < x.meta.Head.Version {
		i := int(v - g[0].Record.Version)
		r := g[i].Record
		r.Key = key
		return r, i, nil
	}
	r, err := recordOf(key, x.meta.Head) // the head version: after the group's, if any
	return r, len(x.meta.Group), err
}

// ReadOptions tune a read.
type ReadOptions struct {
	// Verify checks the conversation against its record's SHA-256 (2.3 MB: 1–2 ms). Every piece's
	// CRC-32C and the version's size are checked whatever it says.
	Verify bool
}

// maxReadAttempts bounds how often a read starts again because the log changed under it.
const maxReadAttempts = 4

// Read returns version v of key (0: the head) as the conversation's canonical JSON array, and its
// record. A read that comes up short because a pack deleted entries meanwhile starts again.
func (e *Engine) Read(ctx context.Context, key Key, v uint64, opt ReadOptions) ([]byte, Record, error) {
	for attempt := 0; ; attempt++ {
		conv, rec, err := e.read(ctx, key, v)
		if errors.Is(err, errShort) && attempt+1 < maxReadAttempts {
			continue
		}
		if err != nil {
			return nil, Record{}, err
		}
		if opt.Verify {
			if sum := sha256.Sum256(conv); "sha256:"+hex.EncodeToString(sum[:]) != rec.Hash {
				return nil, Record{}, fmt.Errorf("version %d of %s: %w: it does not hash to its record's %s", rec.Version, key, ErrCorrupt, rec.Hash)
			}
		}
		return conv, rec, nil
	}
}

// last returns key's last entry, decoded (ErrNotFound if the log is empty).
func (e *Engine) last(ctx context.Context, key Key) (ent, error) {
	en, err := e.log.Last(ctx, key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return ent{}, fmt.Errorf("session %s: %w", key, ErrNotFound)
		}
		return ent{}, err
	}
	m, data, err := decodeEntry(en.Data)
	if err != nil {
		return ent{}, fmt.Errorf("session %s entry %d: %w", key, en.Seq, err)
	}
	return ent{seq: en.Seq, meta: m, data: data, raw: en.Data}, nil
}

// checkVersion settles which version v (0: the head) names, given the session's head.
func checkVersion(key Key, h headState, v uint64) (uint64, error) {
	switch {
	case h.Version == 0:
		return 0, fmt.Errorf("session %s: %w: it has no version", key, ErrNotFound)
	case v == 0:
		return h.Version, nil
	case v > h.Version:
		return 0, fmt.Errorf("session %s version %d: %w (the head is version %d)", key, v, ErrNotFound, h.Version)
	case v < max(h.FirstVersion, 1):
		return 0, fmt.Errorf("session %s version %d: %w (pruned by retention; the oldest kept is version %d)", key, v, ErrNotFound, h.FirstVersion)
	}
	return v, nil
}

func (e *Engine) read(ctx context.Context, key Key, v uint64) ([]byte, Record, error) {
	last, err := e.last(ctx, key)
	if err != nil {
		return nil, Record{}, err
	}
	if v, err = checkVersion(key, last.meta.Head, v); err != nil {
		return nil, Record{}, err
	}
	entries, err := e.holding(ctx, key, last, v)
	if err != nil {
		return nil, Record{}, err
	}
	log, rec, err := e.logOf(ctx, key, entries, v, 0)
	if err != nil {
		return nil, Record{}, err
	}
	return append(log, ']'), rec, nil
}

// holding returns key's live entries up to the one holding version v, given its last entry.
// When the packs are likely few (below), they are fetched alone, one at a time (packChain): they
// are all a version they hold needs, and a batched read from the start would fetch every entry
// after them too. A later version takes the entries after the last pack as well, read without
// their sequences if the Log can (tailData). Otherwise, or if the log moved meanwhile, one batch
// from the session's start (entriesHolding), up to the last pack if v is in it or before it.
//
// The packs are likely few when the versions before the entries since the last pack are no more
// than one pack of PackEntries holds: one pack, or two if one was cut by PackBytes; otherwise
// fetching packs one at a time would cost a round trip or two before the batch anyway.
func (e *Engine) holding(ctx context.Context, key Key, last ent, v uint64) ([]ent, error) {
	if alone(last, v) {
		return []ent{last}, nil
	}
	upTo := upToFor(last, v)
	h := last.meta.Head
	if p := lastPackOf(last); p != 0 && h.Version <= uint64(e.cfg.PackEntries)+uint64(h.TailEntries+h.TailExtra) {
		chain, err := e.packChain(ctx, key, last, p)
		if err != nil {
			return nil, err
		}
		if i := firstHolding(chain, v); i >= 0 {
			return chain[:i+1], nil
		}
		if chain != nil && upTo == last.seq {
			tail, err := e.tailData(ctx, key, last)
			if err != nil || tail != nil {
				if err != nil {
					return nil, err
				}
				entries, err := resolve(key, append(chain, tail...), true)
				if err != nil {
					return nil, err
				}
				if i := firstHolding(entries, v); i >= 0 {
					return entries[:i+1], nil
				}
			}
		}
	}
	return e.entriesHolding(ctx, key, sinceOf(last), upTo, v)
}

// alone reports whether version v is held by the last entry alone: a save, not in parts, that is
// the only entry since the session began or was last deleted (TailEntries counts the entries
// since the last pack or deletion, parts not included; there is no pack). Reading it needs
// nothing but the last entry, which the read has: a session's first save, read back (restores of
// a session saved once, forks, the daemon's first read after a save), costs one round trip, not two.
func alone(last ent, v uint64) bool {
	h := last.meta.Head
	return last.meta.Kind == kindSave && last.meta.Parts == 0 && h.TailEntries == 1 && lastPackOf(last) == 0 && v == h.Version
}

// upToFor is how far a read of version v must go, given the log's last entry: up to the last
// pack if v is in it or before it, so that the saves after it are not fetched; up to the last
// entry otherwise. Every entry after the last pack adds at most one version (versions have no
// gaps once a log has one, and a pack is only made of versions) beyond those TailExtra counts (a
// group entry's earlier versions), so the last pack holds version head − TailEntries − TailExtra
// or a later one.
func upToFor(last ent, v uint64) uint64 {
	h := last.meta.Head
	if p := lastPackOf(last); p != 0 && p != last.seq && h.TailEntries >= 0 && h.TailExtra >= 0 && v+uint64(h.TailEntries+h.TailExtra) <= h.Version {
		return p
	}
	return last.seq
}

// firstHolding returns the index of the first entry holding version v, -1 if none.
func firstHolding(entries []ent, v uint64) int {
	return slices.IndexFunc(entries, func(x ent) bool { return x.meta.Kind != kindFork && holds(v)(x) })
}

// maxPackGets bounds the packs a read fetches one at a time, walking back from the last
// (packChain), before it reads them in one batch instead.
const maxPackGets = 2

// packChain returns the session's packs, oldest first, fetched one at a time from the pack at
// sequence at back, if there are at most maxPackGets and none has parts; nil otherwise. They are
// all the log holds up to the last of them: a pack covers every entry since the pack before it,
// and a fork's first pack copies its source in.
func (e *Engine) packChain(ctx context.Context, key Key, last ent, at uint64) ([]ent, error) {
	var chain []ent
	for len(chain) < maxPackGets && at >= sinceOf(last) {
		var x ent
		if at == last.seq {
			x = last
		} else {
			en, err := e.log.Get(ctx, key, at)
			if errors.Is(err, ErrNotFound) {
				return nil, nil // gone meanwhile: the batched read says what is left
			}
			if err != nil {
				return nil, err
			}
			m, data, err := decodeEntry(en.Data)
			if err != nil {
				return nil, fmt.Errorf("session %s entry %d: %w", key, en.Seq, err)
			}
			x = ent{seq: en.Seq, meta: m, data: data}
		}
		if x.meta.Kind != kindPack || x.meta.Parts > 0 {
			return nil, nil
		}
		chain = append(chain, x)
		if x.meta.Head.Pack == 0 {
			slices.Reverse(chain) // the first pack: the chain is whole
			return chain, nil
		}
		at = x.meta.Head.Pack
	}
	return nil, nil
}

// tailData returns the entries after the session's last pack, up to its last entry, read without
// their sequences (DataReader; the last one's is last's): nil if the Log cannot, or if what it
// read is not exactly those entries. The last entry's head counts them (TailEntries, parts not
// included), and no two entries of a log have the same bytes (each holds its head, whose tail
// count grows by one per entry after a pack): so if exactly that many came after the pack and the
// last of them is the log's last entry, none was deleted in between and none is missing. A save
// with parts, a pack or a deletion meanwhile, a replica behind: anything else gets nil.
// (A state-only pack, packState, resets the count without being a pack: the entries after the
// pack are then more than n, the n-th is not the last, and the batched read answers.)
func (e *Engine) tailData(ctx context.Context, key Key, last ent) ([]ent, error) {
	dr, ok := e.log.(DataReader)
	n := last.meta.Head.TailEntries
	if !ok || n <= 0 || last.raw == nil || last.meta.Kind == kindPack {
		return nil, nil
	}
	var datas [][]byte
	err := dr.ReadData(ctx, key, last.meta.Head.Pack, n, func(data []byte) bool {
		datas = append(datas, data)
		return true
	})
	if err != nil {
		return nil, err
	}
	if len(datas) != n || !bytes.Equal(datas[n-1], last.raw) {
		return nil, nil
	}
	tail := make([]ent, 0, n)
	for _, d := range datas[:n-1] {
		m, data, err := decodeEntry(d)
		if err != nil {
			return nil, fmt.Errorf("session %s, an entry after pack %d: %w", key, last.meta.Head.Pack, err)
		}
		tail = append(tail, ent{meta: m, data: data})
	}
	return append(tail, last), nil
}

// logAt reads key's entries from sequence from (its last deletion) up to upTo and returns "["
// followed by the log of version v (its messages joined by ","), and v's record.
func (e *Engine) logAt(ctx context.Context, key Key, from, upTo, v uint64) ([]byte, Record, error) {
	return e.logAtDepth(ctx, key, from, upTo, v, 0)
}

// maxForkDepth bounds how many forks a read goes through (a fork of a fork of ...) before the
// first pack of each copies its source in.
const maxForkDepth = 16

func (e *Engine) logAtDepth(ctx context.Context, key Key, from, upTo, v uint64, depth int) ([]byte, Record, error) {
	entries, err := e.entriesHolding(ctx, key, from, upTo, v)
	if err != nil {
		return nil, Record{}, err
	}
	return e.logOf(ctx, key, entries, v, depth)
}

// logOf returns "[" followed by the log of version v (its messages joined by ","), and v's
// record, from entries: key's live entries up to the one holding v (entriesHolding).
func (e *Engine) logOf(ctx context.Context, key Key, entries []ent, v uint64, depth int) ([]byte, Record, error) {
	var err error
	target := entries[len(entries)-1]
	rec, n, err := recordIn(key, target, v)
	if err != nil {
		return nil, Record{}, err
	}
	lb := logBuilder{out: append(make([]byte, 0, sizeHint(rec.RawBytes+64)), '['), // room for "]", and for the decoder
		fetch: func(ref valueRef) ([]byte, error) { return e.value(ctx, key.Namespace, ref) }}
	for i, x := range entries {
		switch x.meta.Kind {
		case kindFork:
			if i != 0 {
				return nil, Record{}, fmt.Errorf("session %s entry %d: %w: a fork entry after the first", key, x.seq, ErrCorrupt)
			}
			var src []byte
			if src, err = e.forkSource(ctx, key, x, depth); err == nil {
				lb.out = append(lb.out, src...)
			}
		case kindSave:
			if len(x.meta.Group) == 0 {
				err = lb.add(x.meta.Piece, x.data)
				break
			}
			ps, ds := groupPieces(x.meta, x.data)
			if i == len(entries)-1 && n+1 < len(ps) {
				// Read up to a version inside the group: its run decodes whole, the rest dropped.
				// (By place, not sequence: the entries after the last pack may come without
				// their sequences, tailData.)
				ps, ds, lb.partial = ps[:n+1], ds[:n+1], true
			}
			for i := range ps {
				if err = lb.add(ps[i], ds[i]); err != nil {
					break
				}
			}
		case kindPack:
			packed := x.meta.Packed
			if x.seq == target.seq {
				packed, lb.partial = packed[:n+1], n+1 < len(packed)
			}
			err = lb.addPack(packed, x.data, x.meta.Open)
		}
		if err != nil {
			return nil, Record{}, fmt.Errorf("session %s entry %d: %w", key, x.seq, err)
		}
	}
	log, err := lb.result()
	if err == nil && int64(len(log)+1) != rec.RawBytes {
		err = fmt.Errorf("session %s version %d: %w: the log has %d bytes, its record says %d", key, v, ErrCorrupt, len(log)-1, rec.RawBytes-2)
	}
	return log, rec, err
}

// forkSource returns the log (no "[") of the version a fork entry starts from, read through its
// source session, checked against the fork's version 1.
func (e *Engine) forkSource(ctx context.Context, key Key, x ent, depth int) ([]byte, error) {
	src := x.meta.Source
	if depth >= maxForkDepth {
		return nil, fmt.Errorf("session %s: %w: more than %d forks deep", key, ErrCorrupt, maxForkDepth)
	}
	last, err := e.last(ctx, src.Fork)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("session %s, forked from %s version %d: %w: the source is gone", key, src.Fork, src.Version, ErrCorrupt)
	}
	if err != nil {
		return nil, err
	}
	if _, err := checkVersion(src.Fork, last.meta.Head, src.Version); err != nil {
		return nil, fmt.Errorf("session %s, forked from %s version %d: %w: %v", key, src.Fork, src.Version, ErrCorrupt, err)
	}
	entries, err := e.holding(ctx, src.Fork, last, src.Version)
	if err != nil {
		return nil, fmt.Errorf("session %s, forked from %s: %w", key, src.Fork, err)
	}
	log, rec, err := e.logOf(ctx, src.Fork, entries, src.Version, depth+1)
	if err != nil {
		return nil, fmt.Errorf("session %s, forked from %s: %w", key, src.Fork, err)
	}
	mine, err := finish(x.meta.Head.State)
	if err != nil {
		return nil, err
	}
	if rec.Hash != mine {
		return nil, fmt.Errorf("session %s: %w: its source %s version %d is %s, the fork started from %s", key, ErrCorrupt, src.Fork, src.Version, rec.Hash, mine)
	}
	return log[1:], nil
}

// Head returns the record of key's newest version: one read of the log's last entry, so that it
// sees every save any daemon made before (read-your-writes).
func (e *Engine) Head(ctx context.Context, key Key) (Record, error) {
	last, err := e.last(ctx, key)
	if err != nil {
		return Record{}, err
	}
	if _, err := checkVersion(key, last.meta.Head, 0); err != nil {
		return Record{}, err
	}
	return recordOf(key, last.meta.Head)
}

// Version returns the record of version n of key (0: the head), walking back from the head: the
// entries since the last pack, then one pack at a time.
func (e *Engine) Version(ctx context.Context, key Key, n uint64) (Record, error) {
	return retryShort(func() (Record, error) { return e.version(ctx, key, n) })
}

// retryShort runs read again while it comes up short (the log moved under it: errShort), at most
// maxReadAttempts times in all; a read still short then is reported as it is (ErrCorrupt).
func retryShort[T any](read func() (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		v, err := read()
		if errors.Is(err, errShort) && attempt+1 < maxReadAttempts {
			continue
		}
		return v, err
	}
}

func (e *Engine) version(ctx context.Context, key Key, n uint64) (Record, error) {
	last, err := e.last(ctx, key)
	if err != nil {
		return Record{}, err
	}
	if n, err = checkVersion(key, last.meta.Head, n); err != nil {
		return Record{}, err
	}
	if n == last.meta.Head.Version {
		return recordOf(key, last.meta.Head)
	}
	var found *Record
	err = e.walkBack(ctx, key, last, int(min(last.meta.Head.Version-n+1, maxBackRecords+1)), func(r Record) bool {
		if r.Version == n {
			found = &r
		}
		return r.Version > n
	})
	if err != nil {
		return Record{}, err
	}
	if found == nil {
		return Record{}, fmt.Errorf("session %s version %d: %w", key, n, errShort)
	}
	return *found, nil
}

// walkBack calls fn with the session's records newest first, from the last entry's, until fn
// returns false: the saves since the last pack (one read of them all, or, when fn takes at most
// need of them, few against the tail (0: not known), the entries their back pointers name: back.go),
// then each pack's, one read each.
func (e *Engine) walkBack(ctx context.Context, key Key, last ent, need int, fn func(Record) bool) error {
	return e.walkBackFrom(ctx, key, last, 0, need, func(r Record, _ uint64) bool { return fn(r) })
}

// walkBackFrom is walkBack starting at the pack at sequence pack (0: at the head), fn also given
// the sequence of the pack holding each record (0: not in a pack).
func (e *Engine) walkBackFrom(ctx context.Context, key Key, last ent, pack uint64, need int, fn func(Record, uint64) bool) error {
	w := &backWalk{key: key, fn: fn, first: max(last.meta.Head.FirstVersion, 1)}
	if pack == 0 {
		var err error
		if pack, err = e.walkTail(ctx, key, last, need, w); err != nil || w.done {
			return err
		}
	}
	for pack != 0 {
		x, err := e.entryAt(ctx, key, pack)
		if err != nil {
			return err
		}
		if x.meta.Kind != kindPack {
			return fmt.Errorf("session %s entry %d: %w: the head names it as a pack", key, pack, ErrCorrupt)
		}
		for i := len(x.meta.Packed) - 1; i >= 0; i-- {
			if goOn, err := w.give(x.meta.Packed[i].Record, pack); err != nil || !goOn {
				return err
			}
		}
		if x.meta.Head.Pack >= pack {
			// Each pack names one before it: a walk that passes over the versions it gave already
			// would otherwise go round these packs forever.
			return fmt.Errorf("session %s entry %d: %w: a pack naming pack %d as the one before it", key, pack, ErrCorrupt, x.meta.Head.Pack)
		}
		pack = x.meta.Head.Pack
	}
	return nil
}

// walkTail gives w the records of the entries since the last pack, newest first (by back pointer
// when need says few are wanted, else in one read), and returns the pack before them (0: none).
func (e *Engine) walkTail(ctx context.Context, key Key, last ent, need int, w *backWalk) (uint64, error) {
	if byBack(last, need) {
		pack, ok, err := e.backPointers(ctx, key, last, need, w)
		if err != nil || ok {
			return pack, err
		}
		// An entry written before back pointers, or a long walk: read the tail (w passes over
		// the versions it was given already).
	}
	tail, prev, packed, err := e.tailRecords(ctx, key, last)
	if err != nil {
		return 0, err
	}
	for i := len(tail) - 1; i >= 0; i-- {
		at := uint64(0)
		if i < packed {
			at = lastPackOf(last) // the last pack's records come first in the tail
		}
		if goOn, err := w.give(tail[i], at); err != nil || !goOn {
			return 0, err
		}
	}
	return prev, nil
}

// sinceOf is where the live part of a log ends by x starts: its session's last deletion.
func sinceOf(x ent) uint64 {
	if x.meta.Deletion {
		return x.seq
	}
	return x.meta.Head.Deleted
}

func lastPackOf(x ent) uint64 {
	if x.meta.Kind == kindPack {
		return x.seq
	}
	return x.meta.Head.Pack
}

// tailRecords returns the records of the last pack and the saves after it, oldest first, read
// up to the last entry, the sequence of the pack before the last one (0: none), and how many of
// the records are the last pack's.
func (e *Engine) tailRecords(ctx context.Context, key Key, last ent) ([]Record, uint64, int, error) {
	entries, err := e.entriesFor(ctx, key, max(lastPackOf(last), sinceOf(last)), last.seq, false)
	if err != nil {
		return nil, 0, 0, err
	}
	var prev uint64
	packed := 0
	if len(entries) > 0 && entries[0].meta.Kind == kindPack {
		prev, packed = entries[0].meta.Head.Pack, len(entries[0].meta.Packed)
	}
	recs, err := records(key, entries)
	return recs, prev, packed, err
}

// records returns the records of the saves and packs among entries, in order.
func records(key Key, entries []ent) ([]Record, error) {
	var out []Record
	for _, x := range entries {
		switch x.meta.Kind {
		case kindPack:
			for _, p := range x.meta.Packed {
				r := p.Record
				r.Key = key
				out = append(out, r)
			}
		case kindSave, kindFork:
			for _, g := range x.meta.Group { // a group entry's earlier versions
				r := g.Record
				r.Key = key
				out = append(out, r)
			}
			r, err := recordOf(key, x.meta.Head)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// History returns the records of key's versions, oldest first (one read of the whole log).
func (e *Engine) History(ctx context.Context, key Key) ([]Record, error) {
	return retryShort(func() ([]Record, error) { return e.history(ctx, key) })
}

func (e *Engine) history(ctx context.Context, key Key) ([]Record, error) {
	last, err := e.last(ctx, key)
	if err != nil {
		return nil, err
	}
	if _, err := checkVersion(key, last.meta.Head, 0); err != nil {
		return nil, err
	}
	entries, err := e.entries(ctx, key, sinceOf(last), last.seq, nil)
	if err != nil {
		return nil, err
	}
	first := max(last.meta.Head.FirstVersion, 1)
	out, err := records(key, entries)
	return slices.DeleteFunc(out, func(r Record) bool { return r.Version < first }), err
}

// HistoryCursor is where a page of history goes on: the versions below Before, found from the
// pack at sequence Pack on (0: from the head; a hint, checked: a stale or forged one only costs a
// walk from the head). The zero cursor starts at the head.
type HistoryCursor struct {
	Before uint64
	Pack   uint64
}

// HistoryPage returns up to limit records of key, newest first, below the cursor, and the cursor
// of the next page (zero: no more). It walks back from the head: the few newest records by the
// entries' back pointers (a read of about as many entries), more of them with one read of the
// entries since the last pack, then one pack per PackEntries versions (docs/format.md §8.6,
// §8.15b): a page deep in a long history walks back through the packs above it.
func (e *Engine) HistoryPage(ctx context.Context, key Key, cur HistoryCursor, limit int) ([]Record, HistoryCursor, error) {
	if limit <= 0 {
		return nil, HistoryCursor{}, fmt.Errorf("%w: a history page of %d records", ErrBadRequest, limit)
	}
	for attempt := 0; ; attempt++ {
		last, err := e.last(ctx, key)
		if err != nil {
			return nil, HistoryCursor{}, err
		}
		if _, err := checkVersion(key, last.meta.Head, 0); err != nil {
			return nil, HistoryCursor{}, err
		}
		var out []Record
		var at uint64 // the pack holding the last record taken
		walk := func(r Record, pack uint64) bool {
			if cur.Before != 0 && r.Version >= cur.Before {
				return true
			}
			out, at = append(out, r), pack
			return len(out) < limit
		}
		from := uint64(0)
		if cur.Pack != 0 && cur.Before != 0 && e.isPackHolding(ctx, key, last, cur.Pack, cur.Before) {
			from = cur.Pack
		}
		err = e.walkBackFrom(ctx, key, last, from, pageNeed(last.meta.Head.Version, cur.Before, limit), walk)
		if errors.Is(err, errShort) && attempt+1 < maxReadAttempts {
			continue
		}
		// Versions are every one from the first kept to the head: the page's last is not the
		// first, more follow (found without reading them).
		if err != nil || len(out) < limit || out[len(out)-1].Version <= max(last.meta.Head.FirstVersion, 1) {
			return out, HistoryCursor{}, err
		}
		return out, HistoryCursor{Before: out[len(out)-1].Version, Pack: at}, nil
	}
}

// pageNeed is how many records from the head down a page of limit below version before (0: from
// the head) passes or takes.
func pageNeed(head, before uint64, limit int) int {
	skip := uint64(0)
	if before != 0 && before <= head {
		skip = head - before + 1
	}
	return int(min(skip+uint64(limit), maxBackRecords+1))
}

// isPackHolding reports whether seq is a pack of key's live log holding version v (a cursor's
// hint is the client's): the walk back from it then meets every version below v.
func (e *Engine) isPackHolding(ctx context.Context, key Key, last ent, seq, v uint64) bool {
	if seq < sinceOf(last) || seq > last.seq {
		return false
	}
	en, err := e.log.Get(ctx, key, seq)
	if err != nil {
		return false
	}
	m, _, err := decodeEntry(en.Data)
	return err == nil && m.Kind == kindPack && holds(v)(ent{seq: seq, meta: m})
}
