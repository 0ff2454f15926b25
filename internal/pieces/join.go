package pieces

import (
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
)

// Numbering says what number a piece carries.
type Numbering uint8

const (
	// ByIndex: piece i carries i, from 0 (a save's chunks, Cp-Chunk; the engine's parts, by
	// their place in the log). The sender announces how many pieces there are.
	ByIndex Numbering = iota
	// ByOffset: a piece carries the offset of its first byte in the body (a read's replies,
	// Cp-Offset). The sender announces how many bytes there are.
	ByOffset
)

func (n Numbering) String() string {
	if n == ByOffset {
		return "offset"
	}
	return "index"
}

// Budget is told of the bytes of every piece before it is held and after it is let go (the
// daemon's memory for saves in progress; codec.Growth is one). Reserve's error is returned as it
// is.
type Budget interface {
	Reserve(n int64) error
	Release(n int64)
}

// Config says how a Joiner numbers and bounds the pieces of one body.
type Config struct {
	By Numbering
	// Limit is the most bytes the pieces may hold together; a piece that would pass it is
	// refused (ErrTooLarge) before it is kept. 0: no limit but the int64's.
	Limit int64
	// SkipRepeats lets a piece (ByIndex) repeating one already taken be skipped rather than
	// refused: a sender that resends its pieces from the first after a lost acknowledgement
	// leaves such repeats behind (a save's chunks, docs/protocol.md §12). A repeat must hold the
	// bytes of the piece taken at its index (ErrChanged otherwise): pieces of another body under
	// the same numbers (an earlier attempt of one save id that sent other bytes) are never
	// joined with, or taken for, this one's. The Joiner keeps a keyed 8-byte hash of each piece
	// taken for that, no copy of its bytes.
	SkipRepeats bool
	// Budget, when not nil, counts the bytes of every piece taken.
	Budget Budget
}

// Joiner checks and joins the pieces of one body in order. Everything the sender announces (the
// end, a tag naming the body) is only compared with what arrives: nothing is sized from it, so a
// count or a total costs nothing until its bytes are there.
type Joiner struct {
	cfg      Config
	end      int64  // the announced end: pieces (ByIndex) or bytes (ByOffset); -1: not yet
	tag      string // what the first announcement said of the body
	taken    int64  // pieces taken
	received int64  // their bytes
	reserved int64  // bytes reserved with the budget and not released
	body     []byte // the pieces Add took, joined
	// sums are the hashes of the pieces taken (SkipRepeats), under seed, to check repeats.
	sums []uint64
	seed maphash.Seed
}

// sumSize is the memory of one hash in Joiner.sums.
const sumSize = 8

// NewJoiner returns a Joiner for one body.
func NewJoiner(cfg Config) *Joiner {
	if cfg.Limit <= 0 {
		cfg.Limit = math.MaxInt64
	}
	j := &Joiner{cfg: cfg, end: -1}
	if cfg.SkipRepeats {
		j.seed = maphash.MakeSeed() // random: a sender cannot make other bytes hash alike
	}
	return j
}

// Expect records what the sender announces with a piece: the end (how many pieces ByIndex, how
// many bytes ByOffset) and tag, anything else it says of the whole body (a hash, an encoding).
// The first announcement fixes them; one that differs later is ErrChanged. An end that the limit
// cannot hold (each piece holds at least a byte) is ErrTooLarge at once.
func (j *Joiner) Expect(end int64, tag string) error {
	switch {
	case end < 0 || end > j.cfg.Limit:
		return j.refuse(-1, ErrTooLarge, fmt.Sprintf("%d %s announced, the limit is %d bytes", end, j.unit(), j.cfg.Limit))
	case j.end < 0:
		j.end, j.tag = end, tag
	case end != j.end || tag != j.tag:
		return j.refuse(-1, ErrChanged, fmt.Sprintf("%d %s and %q announced, first %d and %q", end, j.unit(), tag, j.end, j.tag))
	}
	return nil
}

// Take checks that the piece numbered at, holding data, comes next, and reserves its bytes. It
// returns false, and nothing is reserved, for a repeat that Config.SkipRepeats skips. It does
// not keep data (Add does). With SkipRepeats it also reserves the room of the pieces' hashes as
// it grows (Release(-1) gives it back).
func (j *Joiner) Take(at int64, data []byte) (bool, error) {
	next := j.Next()
	switch {
	case at < next && j.cfg.By == ByIndex && j.cfg.SkipRepeats && at >= 0:
		if maphash.Bytes(j.seed, data) != j.sums[at] {
			return false, j.refuse(at, ErrChanged, fmt.Sprintf("index %d repeated with other bytes than the piece taken", at))
		}
		return false, nil
	case at < next:
		return false, j.refuse(at, ErrRepeat, fmt.Sprintf("%s %d was expected", j.cfg.By, next))
	case at > next:
		return false, j.refuse(at, ErrGap, fmt.Sprintf("%s %d was expected", j.cfg.By, next))
	case j.end >= 0 && j.cfg.By == ByIndex && at >= j.end:
		return false, j.refuse(at, ErrOverrun, fmt.Sprintf("%d pieces announced", j.end))
	case len(data) == 0 && j.end >= 0 && j.cfg.By == ByOffset && at == j.end:
		return false, nil // the end of an empty body: nothing to take
	case len(data) == 0:
		return false, j.refuse(at, ErrEmpty, "a piece holds at least one byte")
	case j.end >= 0 && j.cfg.By == ByOffset && int64(len(data)) > j.end-j.received:
		return false, j.refuse(at, ErrOverrun, fmt.Sprintf("%d bytes from %d, %d announced", len(data), j.received, j.end))
	case int64(len(data)) > j.cfg.Limit-j.received:
		return false, j.refuse(at, ErrTooLarge, fmt.Sprintf("the pieces hold more than %d bytes", j.cfg.Limit))
	}
	// The hashes of the pieces taken (SkipRepeats) are memory too: 8 bytes a piece, more than the
	// piece for pieces of a byte, so their room is reserved as it grows.
	var grow int
	if j.cfg.SkipRepeats && len(j.sums) == cap(j.sums) {
		grow = max(cap(j.sums), 16)
	}
	if j.cfg.Budget != nil {
		n := int64(len(data)) + sumSize*int64(grow)
		if err := j.cfg.Budget.Reserve(n); err != nil {
			return false, err
		}
		j.reserved += n
	}
	if grow > 0 {
		j.sums = append(make([]uint64, 0, cap(j.sums)+grow), j.sums...)
	}
	if j.cfg.SkipRepeats {
		j.sums = append(j.sums, maphash.Bytes(j.seed, data))
	}
	j.taken++
	j.received += int64(len(data))
	return true, nil
}

// Add is Take, and joins the piece taken to the body. The body grows with the bytes received: at
// first room for up to 16 pieces as long as the first (within the announced end: the pieces of
// one body are cut alike), then as append grows it.
func (j *Joiner) Add(at int64, data []byte) (bool, error) {
	ok, err := j.Take(at, data)
	if !ok {
		return false, err
	}
	if j.body == nil && j.end > 0 {
		room := 16 * int64(len(data))
		if j.cfg.By == ByOffset {
			room = min(room, j.end)
		} else {
			room = min(16, j.end) * int64(len(data))
		}
		j.body = make([]byte, 0, room)
	}
	j.body = append(j.body, data...)
	return true, nil
}

// Join joins pieces held in memory, numbered by their place (piece i is ps[i]), with every check
// of a Joiner by index: what a store that keeps a body's pieces in order (the engine's part
// entries) reads back. limit bounds their bytes (0: none).
func Join(ps [][]byte, limit int64) ([]byte, error) {
	j := NewJoiner(Config{By: ByIndex, Limit: limit})
	if err := j.Expect(int64(len(ps)), ""); err != nil {
		return nil, err
	}
	for i, p := range ps {
		if _, err := j.Add(int64(i), p); err != nil {
			return nil, err
		}
	}
	return j.Finish()
}

// Next is the number the next piece must carry: its index, or its offset.
func (j *Joiner) Next() int64 {
	if j.cfg.By == ByOffset {
		return j.received
	}
	return j.taken
}

// Received is how many bytes the pieces taken hold.
func (j *Joiner) Received() int64 { return j.received }

// Done reports whether the announced end is reached.
func (j *Joiner) Done() bool { return j.end >= 0 && j.Next() == j.end }

// Finish returns the body Add joined, once the announced end is reached (ErrMissing naming the
// first piece missing before that).
func (j *Joiner) Finish() ([]byte, error) {
	if !j.Done() {
		return nil, j.missing()
	}
	return j.body, nil
}

// Release gives back to the budget n of the bytes reserved (all of them when n < 0 or more than
// are), once the caller no longer holds them.
func (j *Joiner) Release(n int64) {
	if n < 0 || n > j.reserved {
		n = j.reserved
	}
	if j.cfg.Budget != nil && n > 0 {
		j.cfg.Budget.Release(n)
	}
	j.reserved -= n
}

func (j *Joiner) missing() error {
	detail := "no end announced"
	if j.end >= 0 {
		detail = fmt.Sprintf("%d of %d %s received", j.Next(), j.end, j.unit())
	}
	return j.refuse(-1, ErrMissing, detail)
}

func (j *Joiner) unit() string {
	if j.cfg.By == ByOffset {
		return "bytes"
	}
	return "pieces"
}

func (j *Joiner) refuse(at int64, err error, detail string) error {
	return &Error{Piece: j.taken, At: at, By: j.cfg.By, Err: err, Detail: detail}
}

// Reader reads a body whose pieces next returns one at a time, in order, checked by a Joiner:
// only the current piece is held (and reserved), so a body is never held both in pieces and
// whole, and a missing piece is found when its turn comes. next returns io.EOF when there are no
// more pieces; any other error (storage) is returned as it is.
type Reader struct {
	j    *Joiner
	next func() (at int64, data []byte, err error)
	cur  []byte // the unread rest of the current piece
	held int64  // the current piece's bytes, reserved
	err  error  // the first failure of the pieces, kept so a caller can tell it from its own
	// drained: the pieces after the end were read (SkipRepeats: each must repeat one taken).
	drained bool
}

// NewReader returns a Reader of the pieces next returns; j must have the end announced.
func NewReader(j *Joiner, next func() (at int64, data []byte, err error)) *Reader {
	return &Reader{j: j, next: next}
}

// Fetch reads the next piece taken, skipping repeats, and lets go of the one before; at the end,
// io.EOF.
func (r *Reader) Fetch() error {
	if r.err != nil {
		return r.err
	}
	if r.j.Done() {
		if err := r.drain(); err != nil {
			r.err = err
			return err
		}
		return io.EOF
	}
	for {
		at, data, err := r.next()
		if errors.Is(err, io.EOF) {
			err = r.j.missing()
		} else if pe := (*Error)(nil); errors.As(err, &pe) && pe.Piece < 0 {
			pe.Piece, pe.By = r.j.taken, r.j.cfg.By // a number the source could not read
		}
		var ok bool
		if err == nil {
			ok, err = r.j.Take(at, data)
		}
		if err != nil {
			r.err = err
			return err
		}
		if ok {
			r.j.Release(r.held)
			r.cur, r.held = data, int64(len(data))
			return nil
		}
	}
}

// drain reads, once, the pieces left after the end, when repeats are skipped: each must be a
// repeat of a piece taken (a resend), never the pieces of another body under the same numbers
// that the end was reached before (an earlier attempt with other bytes, then this one's), nor a
// piece past the end (ErrOverrun).
func (r *Reader) drain() error {
	if r.drained || !r.j.cfg.SkipRepeats {
		return nil
	}
	r.drained = true
	for {
		at, data, err := r.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if pe := (*Error)(nil); errors.As(err, &pe) && pe.Piece < 0 {
			pe.Piece, pe.By = r.j.taken, r.j.cfg.By // a number the source could not read
		}
		if err == nil {
			_, err = r.j.Take(at, data) // never taken: at the end, a piece is a repeat or past it
		}
		if err != nil {
			return err
		}
	}
}

// Current is the unread rest of the current piece (after the first Fetch: the body's first bytes).
func (r *Reader) Current() []byte { return r.cur }

// Err is the first failure of the pieces, if any: what went wrong was the pieces (or the budget),
// not what the caller made of their bytes.
func (r *Reader) Err() error { return r.err }

func (r *Reader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if err := r.Fetch(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}
