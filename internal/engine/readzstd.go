package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"

	"github.com/klauspost/compress/zstd"
)

// ReadZstd returns version v of key (0: the head) as a zstd stream (concatenated frames) whose
// decompression is exactly what Read returns, and its record: reads travel compressed (issue 12,
// item 2). Where the version is the stored stream as it is (no rewrite before it, no values, not
// a version inside a pack but its last), the stored frames are passed through undecoded, each
// run ended with frameEnd, between a frame holding "[" and one holding "]": the daemon decodes
// nothing, and so checks nothing but the structure (the reader checks the record's hash, as it
// must anyway). A version inside a recompressed pack (its prefix) after such entries: they pass
// through, and the pack alone is decoded and its prefix compressed at zstd's fastest level.
// Otherwise the version is built from the entries read, as Read builds it, and compressed at
// zstd's fastest level.
func (e *Engine) ReadZstd(ctx context.Context, key Key, v uint64) ([]byte, Record, error) {
	return e.ReadZstdIf(ctx, key, v, nil)
}

// ReadZstdIf is ReadZstd that asks found, once it knows the record of the version it reads,
// whether to read its body: false returns that record and no bytes (the caller has them cached,
// by the record's hash), an error is returned as it is (the caller cannot take the load). For the
// head (v 0, or the head's number) found is asked with the log's last entry read and nothing
// else, so that a read of the head costs the caller one storage read for its record and its body
// together: that entry alone when it holds the head (alone), else that entry and the ones before
// it, never the last entry twice. For another version found is asked once the entries holding it
// are read. found may be asked again (a read the log moved under starts again); nil reads always.
// Before any of that, where the engine holds the session for saves, found is asked with the head
// it holds, and if found needs no body the log is only asked whether it has an entry after that
// head's (headFromCache: a few bytes), so that a caller with the body cached reads no entry at all;
// a caller that wants the body is not asked again about the same record.
func (e *Engine) ReadZstdIf(ctx context.Context, key Key, v uint64, found func(Record) (bool, error)) ([]byte, Record, error) {
	for attempt := 0; ; attempt++ {
		out, rec, err := e.readZstd(ctx, key, v, found)
		if errors.Is(err, errShort) && attempt+1 < maxReadAttempts {
			continue
		}
		return out, rec, err
	}
}

func (e *Engine) readZstd(ctx context.Context, key Key, v uint64, found func(Record) (bool, error)) ([]byte, Record, error) {
	var asked Record // the head's record found was asked about, from the cache, and said to read
	if found != nil {
		rec, done, err := e.headFromCache(ctx, key, v, found)
		if err != nil || done {
			return nil, rec, err
		}
		asked = rec
	}
	last, err := e.last(ctx, key)
	if err != nil {
		return nil, Record{}, err
	}
	if v, err = checkVersion(key, last.meta.Head, v); err != nil {
		return nil, Record{}, err
	}
	if found != nil && v == last.meta.Head.Version {
		// The head's record is the last entry's (as Head and Version give it): ask before reading more.
		rec, err := recordOf(key, last.meta.Head)
		if err != nil {
			return nil, Record{}, err
		}
		if !sameRecord(rec, asked) { // not asked already
			if read, err := found(rec); err != nil || !read {
				return nil, recordUnless(rec, err), err
			}
		}
		found = nil
	}
	entries, err := e.holding(ctx, key, last, v)
	if err != nil {
		return nil, Record{}, err
	}
	target := entries[len(entries)-1]
	rec, n, err := recordIn(key, target, v)
	if err != nil {
		return nil, Record{}, err
	}
	if found != nil && !sameRecord(rec, asked) { // (v named the cached head, no longer the head)
		if read, err := found(rec); err != nil || !read {
			return nil, recordUnless(rec, err), err
		}
	}
	switch {
	case storedAsIs(entries, target, n):
		out, open := passThrough(append(make([]byte, 0, 64<<10), openBracket...), entries)
		if open {
			out = append(out, frameEnd...)
		}
		return append(out, closeBracket...), rec, nil
	case inRecompressedPack(entries, target):
		out, err := packPrefixZstd(entries, target, n)
		return out, rec, err
	}
	// The entries read are what Read would read: build the version from them, not read it again.
	conv, rec, err := e.logOf(ctx, key, entries, v, 0)
	if err != nil {
		return nil, Record{}, err
	}
	return fastEncoder.EncodeAll(append(conv, ']'), make([]byte, 0, len(conv)/4)), rec, nil
}

// headFromCache asks found about the head as the engine's session cache holds it (cachedHead),
// when v names the head, and checks that it still is the head (Log.Moved: a question whose answer
// is a few bytes) only if found needs no body: done true then, the read is over. found is asked
// first so that a read of a body the caller has not cached costs what it did without the cache
// (the last entry, read next, holds the record and the body; rec, the record found said to read,
// is not asked about again if that entry's is the same). rec zero and done false: nothing to
// trust (not cached, the log moved on, found failed): the caller reads and asks as without a
// cache. found may thus be asked about a head the log has moved past, and then again.
func (e *Engine) headFromCache(ctx context.Context, key Key, v uint64, found func(Record) (bool, error)) (rec Record, done bool, err error) {
	s, seq, h, ok := e.cachedHead(key)
	if !ok || v != 0 && v != h.Version {
		return Record{}, false, nil
	}
	if rec, err = recordOf(key, h); err != nil {
		return Record{}, false, nil // read as without a cache, which reports what is wrong
	}
	read, err := found(rec)
	switch {
	case err != nil:
		return Record{}, false, nil // asked again about the head as the log gives it
	case read:
		return rec, false, nil
	}
	moved, err := e.log.Moved(ctx, key, seq)
	if err != nil || moved {
		if moved {
			e.forgetStale(s, seq)
		}
		return Record{}, false, err
	}
	return rec, true, nil
}

// forgetStale drops session s if it still holds the entry at seq, which the log has moved past
// (another daemon wrote): later reads of the head are not sent to ask about it again (a Moved
// answered true costs the server a look for the log's next entry, however far on it lies, and
// carries that entry), and the next save loads the log's last entry, as a lost compare-and-swap
// would make it. A write under way settles the session itself.
func (e *Engine) forgetStale(s *session, seq uint64) {
	if !s.mu.TryLock() {
		return
	}
	stale := s.loaded && s.lastSeq == seq
	s.mu.Unlock()
	if stale {
		e.forget(s)
	}
}

// cachedHead returns the session, the sequence and the head of key's last entry as the engine's session cache
// holds them (the last entry this engine wrote or loaded for a save), ok false if it holds none
// (not cached, a write under way, no version). Trusted only once Log.Moved says the log has no
// entry after it: that question is what makes the cache safe to read across daemons, as anything
// another daemon appended (a save, a pack, a deletion's tombstone, a lease) is an entry after it;
// only a Purge is not, and whoever purges a log forgets the engine's cache (Engine.Forget: the
// upgrade, the only user of Log.Purge, does, before the daemon serves).
func (e *Engine) cachedHead(key Key) (*session, uint64, headState, bool) {
	e.mu.Lock()
	el, cached := e.sessions[key]
	e.mu.Unlock()
	if !cached {
		return nil, 0, headState{}, false
	}
	s := el.Value.(*session)
	if !s.mu.TryLock() { // a write under way: its outcome is not known yet, and a read waits for nothing
		return nil, 0, headState{}, false
	}
	seq, h, loaded := s.lastSeq, s.last.Head, s.loaded
	s.mu.Unlock()
	return s, seq, h, loaded && seq > 0 && h.Version > 0
}

// sameRecord reports whether a and b are the same record, every field: a head of the same number
// and hash may be another save's (a session deleted and saved again with the same conversation),
// and the caller must be asked about the record it returns, not one like it.
func sameRecord(a, b Record) bool {
	if !a.Created.Equal(b.Created) {
		return false
	}
	a.Created = b.Created // the same instant; a zone or a monotonic reading is no difference
	return reflect.DeepEqual(a, b)
}

// recordUnless is rec, or no record with an error.
func recordUnless(rec Record, err error) Record {
	if err != nil {
		return Record{}
	}
	return rec
}

// passThrough appends the stored data of entries to out, ending each frame before an entry that
// starts one, and says whether the last frame is still open (it needs frameEnd).
func passThrough(out []byte, entries []ent) ([]byte, bool) {
	open := false
	for _, x := range entries {
		if len(x.data) == 0 || x.meta.Kind != kindSave && x.meta.Kind != kindPack {
			continue // adds no bytes
		}
		starts := x.meta.Kind == kindSave && saveStartsFrame(x.meta) || x.meta.Kind == kindPack && startsFrame(x.meta.Packed)
		if starts && open {
			out = append(out, frameEnd...)
		}
		out = append(out, x.data...)
		open = x.meta.Kind == kindSave || x.meta.Open
	}
	return out, open
}

// inRecompressedPack reports whether the version entries end with is a prefix of a recompressed
// pack (a whole frame of its own) after entries that are their stored stream as it is: those pass
// through, and only the pack is decoded, its prefix compressed again (packPrefixZstd).
func inRecompressedPack(entries []ent, target ent) bool {
	return target.meta.Kind == kindPack && !target.meta.Open && startsFrame(target.meta.Packed) && streamAsIs(entries)
}

// packPrefixZstd is ReadZstd of version n of the recompressed pack target (entries' last): the
// entries before it passed through, then the pack decoded, its first n+1 pieces checked against
// their CRC-32C and compressed as one frame at zstd's fastest level. A zstd block cannot be cut
// where a version ends, so the pack's own frame cannot pass through.
func packPrefixZstd(entries []ent, target ent, n int) ([]byte, error) {
	pieces := make([]pieceInfo, n+1)
	var raw int64
	for i := range pieces {
		pieces[i] = target.meta.Packed[i].Piece
		raw += pieces[i].RawBytes
	}
	out, open := passThrough(append(make([]byte, 0, 64<<10), openBracket...), entries[:len(entries)-1])
	if open {
		out = append(out, frameEnd...)
	}
	cut, plain, ok, err := cutFrame(target.data, raw)
	switch {
	case err != nil:
		return nil, fmt.Errorf("entry %d: %w", target.seq, err)
	case ok:
		if err := checkPieces(plain, pieces); err != nil {
			return nil, fmt.Errorf("entry %d: %w", target.seq, err)
		}
		return append(append(out, cut...), closeBracket...), nil
	}
	if raw > 0 {
		plain, err := decoder.DecodeAll(target.data, make([]byte, 0, sizeHint(raw+64)))
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w: zstd: %v", target.seq, ErrCorrupt, err)
		}
		if int64(len(plain)) < raw {
			return nil, fmt.Errorf("entry %d: %w: a pack decodes to %d bytes, its first %d pieces say %d", target.seq, ErrCorrupt, len(plain), n+1, raw)
		}
		if err := checkPieces(plain[:raw], pieces); err != nil {
			return nil, fmt.Errorf("entry %d: %w", target.seq, err)
		}
		out = fastEncoder.EncodeAll(plain[:raw], out)
	}
	return append(out, closeBracket...), nil
}

// zstdBlockMax is the most a zstd block decodes to (RFC 8878 §3.1.1.2.4, Block_Maximum_Size, with
// a window of at least 128 KiB), and the input the encoder puts in each block of a frame.
const zstdBlockMax = 128 << 10

// frameBlocks returns the header of the zstd frame f, the offsets of its blocks (each block's
// header) and the offset after its last block; ok false if f is not one frame without checksum
// or dictionary whose blocks take the whole of it.
func frameBlocks(f []byte) (h zstd.Header, blocks []int, end int, ok bool) {
	if h.Decode(f) != nil || h.Skippable || h.HasCheckSum || h.DictionaryID != 0 {
		return h, nil, 0, false
	}
	at := h.HeaderSize
	for at+3 <= len(f) {
		v := int(f[at]) | int(f[at+1])<<8 | int(f[at+2])<<16
		size := v >> 3
		switch (v >> 1) & 3 {
		case 1: // RLE: one byte, repeated size times
			size = 1
		case 3:
			return h, nil, 0, false
		}
		blocks = append(blocks, at)
		at += 3 + size
		if v&1 == 1 {
			return h, blocks, at, at == len(f)
		}
	}
	return h, nil, 0, false
}

// singleSegment returns a zstd frame header declaring a single segment of size bytes: the
// decoder decodes straight into its output (a windowed frame goes through a history buffer, ~2×
// slower here), and checks that the frame decodes to exactly that.
func singleSegment(size uint64) []byte {
	return binary.LittleEndian.AppendUint64([]byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0}, size) // 8-byte size, single segment
}

// cutFrame returns a zstd frame that decodes to the first raw bytes of the pack frame f, and
// those bytes: f's blocks that lie within them passed through, the rest in raw blocks, under a
// header of its own (f's declares its whole content's size). ok false: f is not one frame as the
// pack encoder writes it (a single segment, its size declared, no dictionary or checksum), or
// no block lies within the cut; nothing is decoded then.
//
// f is decoded whole once (its pieces' CRC-32C need the bytes). Where its blocks end is not
// decoded again: the pack encoder (EncodeAll) puts zstdBlockMax input bytes in every block but
// the last, and a block decodes to at most that (RFC 8878 §3.1.1.2.4), so blocks that decoded
// to less would make the cut frame shorter than its header declares, which a decoder refuses
// (RFC 8878 §3.1.1.1.4; TestCutFrame checks the encoder's blocks).
func cutFrame(f []byte, raw int64) (out, plain []byte, ok bool, err error) {
	h, blocks, end, ok := frameBlocks(f)
	k := int(raw / zstdBlockMax) // the blocks wholly within the first raw bytes
	if !ok || !h.SingleSegment || !h.HasFCS || k == 0 || int64(h.FrameContentSize) < raw ||
		h.FrameContentSize > maxDecoded || k > len(blocks) {
		return nil, nil, false, nil
	}
	if plain, err = decoder.DecodeAll(f, make([]byte, 0, h.FrameContentSize+64)); err != nil {
		return nil, nil, false, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
	}
	hdr := singleSegment(uint64(raw))
	out = append(hdr, f[h.HeaderSize:blockEnd(blocks, k-1, end)]...)
	out[len(hdr)+blocks[k-1]-h.HeaderSize] &^= 1 // block k-1 is not the last one now
	for rest := plain[k*zstdBlockMax : raw]; ; {
		n := min(len(rest), zstdBlockMax)
		v := n << 3 // a raw block
		if n == len(rest) {
			v |= 1 // the last
		}
		out = append(append(out, byte(v), byte(v>>8), byte(v>>16)), rest[:n]...)
		if rest = rest[n:]; len(rest) == 0 {
			return out, plain[:raw], true, nil
		}
	}
}

// blockEnd is where block i of a frame (blocks and end from frameBlocks) ends.
func blockEnd(blocks []int, i, end int) int {
	if i+1 < len(blocks) {
		return blocks[i+1]
	}
	return end
}

// storedAsIs reports whether the log of the version entries end with is their stored stream as it
// is: every piece appended (no rewrite), none with values, the first starting a frame, and the
// version the last of its entry.
func storedAsIs(entries []ent, target ent, n int) bool {
	if target.meta.Kind == kindPack && n != len(target.meta.Packed)-1 || target.meta.Kind == kindSave && n != len(target.meta.Group) {
		return false // a version inside a pack or a group entry: its data holds the versions after it too
	}
	return streamAsIs(entries)
}

// streamAsIs reports whether every piece of entries is appended as stored (no rewrite, no values,
// no fork), the first with data starting a frame.
func streamAsIs(entries []ent) bool {
	first := true
	for _, x := range entries {
		var pieces []pieceInfo
		switch x.meta.Kind {
		case kindFork:
			return false
		case kindSave:
			for _, p := range x.meta.Group {
				pieces = append(pieces, p.Piece)
			}
			pieces = append(pieces, *x.meta.Piece)
		case kindPack:
			for _, p := range x.meta.Packed {
				pieces = append(pieces, p.Piece)
			}
		default:
			continue
		}
		if len(x.data) > 0 && first {
			if x.meta.Kind == kindSave && !saveStartsFrame(x.meta) || x.meta.Kind == kindPack && !startsFrame(x.meta.Packed) {
				return false
			}
			first = false
		}
		for _, p := range pieces {
			if p.Keep != nil || len(p.Values) > 0 {
				return false
			}
		}
	}
	return true
}

var (
	fastEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(false))
	openBracket  = compressFrame([]byte{'['})
	closeBracket = compressFrame([]byte{']'})
)
