package engine

import (
	"context"
	"errors"

	"github.com/klauspost/compress/zstd"
)

// ReadZstd returns version v of key (0: the head) as a zstd stream (concatenated frames) whose
// decompression is exactly what Read returns, and its record: reads travel compressed (issue 12,
// item 2). Where the version is the stored stream as it is (no rewrite before it, no values, not
// a version inside a pack but its last), the stored frames are passed through undecoded, each
// run ended with frameEnd, between a frame holding "[" and one holding "]": the daemon decodes
// nothing, and so checks nothing but the structure (the reader checks the record's hash, as it
// must anyway). Otherwise the version is read and compressed at zstd's fastest level.
func (e *Engine) ReadZstd(ctx context.Context, key Key, v uint64) ([]byte, Record, error) {
	for attempt := 0; ; attempt++ {
		out, rec, err := e.readZstd(ctx, key, v)
		if errors.Is(err, errShort) && attempt+1 < maxReadAttempts {
			continue
		}
		return out, rec, err
	}
}

func (e *Engine) readZstd(ctx context.Context, key Key, v uint64) ([]byte, Record, error) {
	last, err := e.last(ctx, key)
	if err != nil {
		return nil, Record{}, err
	}
	if v, err = checkVersion(key, last.meta.Head, v); err != nil {
		return nil, Record{}, err
	}
	entries, err := e.entriesHolding(ctx, key, sinceOf(last), last.seq, v)
	if err != nil {
		return nil, Record{}, err
	}
	target := entries[len(entries)-1]
	rec, n, err := recordIn(key, target, v)
	if err != nil {
		return nil, Record{}, err
	}
	if !storedAsIs(entries, target, n) {
		conv, rec, err := e.read(ctx, key, v)
		if err != nil {
			return nil, Record{}, err
		}
		return fastEncoder.EncodeAll(conv, make([]byte, 0, len(conv)/4)), rec, nil
	}
	out := append(make([]byte, 0, 64<<10), openBracket...)
	open := false
	for _, x := range entries {
		if len(x.data) == 0 || x.meta.Kind != kindSave && x.meta.Kind != kindPack {
			continue // adds no bytes
		}
		starts := x.meta.Kind == kindSave && x.meta.Piece.Frame || x.meta.Kind == kindPack && startsFrame(x.meta.Packed)
		if starts && open {
			out = append(out, frameEnd...)
		}
		out = append(out, x.data...)
		open = x.meta.Kind == kindSave || x.meta.Open
	}
	if open {
		out = append(out, frameEnd...)
	}
	return append(out, closeBracket...), rec, nil
}

// storedAsIs reports whether the log of the version entries end with is their stored stream as it
// is: every piece appended (no rewrite), none with values, the first starting a frame, and the
// version the last of its entry.
func storedAsIs(entries []ent, target ent, n int) bool {
	if target.meta.Kind == kindPack && n != len(target.meta.Packed)-1 {
		return false
	}
	first := true
	for _, x := range entries {
		var pieces []pieceInfo
		switch x.meta.Kind {
		case kindFork:
			return false
		case kindSave:
			pieces = []pieceInfo{*x.meta.Piece}
		case kindPack:
			for _, p := range x.meta.Packed {
				pieces = append(pieces, p.Piece)
			}
		default:
			continue
		}
		if len(x.data) > 0 && first {
			if x.meta.Kind == kindSave && !pieces[0].Frame || x.meta.Kind == kindPack && !startsFrame(x.meta.Packed) {
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
