package pieces_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/pieces"
)

func TestSize(t *testing.T) {
	require.Equal(t, int64(1<<20-16<<10), pieces.Size(1<<20, pieces.ChunkRoom))
	require.Equal(t, int64(1<<20-8<<10), pieces.Size(1<<20, pieces.ReplyRoom))
	require.Equal(t, int64(1<<20-1<<10), pieces.Size(1<<20, pieces.EntryRoom))
	require.Equal(t, int64(16<<10), pieces.Size(pieces.MinMaxPayload, pieces.ChunkRoom))
	require.Zero(t, pieces.Size(8<<10, pieces.ChunkRoom), "nothing left: 0, never negative")
}

func TestSplit(t *testing.T) {
	body := []byte("abcdefghij")
	for _, c := range []struct {
		size int64
		want []string
	}{
		{3, []string{"abc", "def", "ghi", "j"}},
		{5, []string{"abcde", "fghij"}},
		{10, []string{"abcdefghij"}},
		{11, []string{"abcdefghij"}},
	} {
		got, err := pieces.Split(body, c.size)
		require.NoError(t, err)
		require.Len(t, got, len(c.want))
		for i := range got {
			require.Equal(t, c.want[i], string(got[i]))
		}
	}
	got, err := pieces.Split(nil, 4)
	require.NoError(t, err)
	require.Empty(t, got, "an empty body is no piece")
	for _, size := range []int64{0, -16 << 10} {
		_, err = pieces.Split(body, size)
		require.ErrorIs(t, err, pieces.ErrNoRoom, "size %d: refused, not a panic or an endless loop", size)
	}
}

func TestCut(t *testing.T) {
	body := []byte("abcdefghij")
	p, err := pieces.Cut(body, 4, 3)
	require.NoError(t, err)
	require.Equal(t, "efg", string(p))
	p, err = pieces.Cut(body, 8, 3)
	require.NoError(t, err)
	require.Equal(t, "ij", string(p))
	p, err = pieces.Cut(body, 10, 3)
	require.NoError(t, err)
	require.Empty(t, p, "the end")
	for _, off := range []int64{-1, 11} {
		_, err = pieces.Cut(body, off, 3)
		require.ErrorIs(t, err, pieces.ErrOutside)
		require.Contains(t, err.Error(), "offset")
	}
}

func TestParseNumber(t *testing.T) {
	n, err := pieces.ParseNumber("Cp-Chunk", "12")
	require.NoError(t, err)
	require.Equal(t, int64(12), n)
	for _, s := range []string{"", "-1", "+1", " 1", "01", "1e3", "x", "9223372036854775808"} {
		_, err := pieces.ParseNumber("Cp-Chunk", s)
		require.ErrorIs(t, err, pieces.ErrNumber, "%q", s)
		require.Contains(t, err.Error(), "Cp-Chunk")
	}
}

func TestCheck(t *testing.T) {
	h := pieces.Hash([]byte("[]"))
	require.NoError(t, pieces.Check(2, 2, h, h))
	require.NoError(t, pieces.Check(2, -1, h, h))
	require.ErrorIs(t, pieces.Check(3, 2, h, h), pieces.ErrLength)
	require.ErrorIs(t, pieces.Check(2, 2, h, "sha256:00"), pieces.ErrHash)
}

// piece is one message of a sequence a sender sends: its number and bytes.
type piece struct {
	at   int64
	data string
}

// join feeds seq to a Joiner announcing end (ByIndex: pieces, ByOffset: bytes) and returns the
// body or the first error.
func join(cfg pieces.Config, end int64, seq []piece) ([]byte, error) {
	j := pieces.NewJoiner(cfg)
	if err := j.Expect(end, "tag"); err != nil {
		return nil, err
	}
	for _, p := range seq {
		if _, err := j.Add(p.at, []byte(p.data)); err != nil {
			return nil, err
		}
	}
	return j.Finish()
}

func TestJoiner_ByIndex(t *testing.T) {
	chunks := pieces.Config{By: pieces.ByIndex, Limit: 10, SkipRepeats: true}
	for _, c := range []struct {
		name  string
		cfg   pieces.Config
		end   int64
		seq   []piece
		want  string
		err   error
		piece int64
	}{
		{name: "in order", cfg: chunks, end: 3, seq: []piece{{0, "ab"}, {1, "cd"}, {2, "e"}}, want: "abcde"},
		{name: "a resend from the first is skipped", cfg: chunks, end: 3,
			seq: []piece{{0, "ab"}, {1, "cd"}, {0, "ab"}, {1, "cd"}, {2, "e"}}, want: "abcde"},
		{name: "repeats refused where not allowed", cfg: pieces.Config{By: pieces.ByIndex}, end: 2,
			seq: []piece{{0, "ab"}, {0, "ab"}}, err: pieces.ErrRepeat, piece: 1},
		{name: "gap", cfg: chunks, end: 3, seq: []piece{{0, "ab"}, {2, "e"}}, err: pieces.ErrGap, piece: 1},
		{name: "first missing", cfg: chunks, end: 2, seq: []piece{{1, "ab"}}, err: pieces.ErrGap, piece: 0},
		{name: "past the count", cfg: chunks, end: 1, seq: []piece{{0, "ab"}, {1, "cd"}}, err: pieces.ErrOverrun, piece: 1},
		{name: "empty piece", cfg: chunks, end: 2, seq: []piece{{0, "ab"}, {1, ""}}, err: pieces.ErrEmpty, piece: 1},
		{name: "more than the limit", cfg: chunks, end: 3, seq: []piece{{0, "abcdef"}, {1, "ghijk"}}, err: pieces.ErrTooLarge, piece: 1},
		{name: "short", cfg: chunks, end: 3, seq: []piece{{0, "ab"}, {1, "cd"}}, err: pieces.ErrMissing, piece: 2},
		{name: "a count the limit cannot hold", cfg: chunks, end: 11, err: pieces.ErrTooLarge},
		{name: "a negative count", cfg: chunks, end: -1, err: pieces.ErrTooLarge},
		{name: "a negative index", cfg: chunks, end: 2, seq: []piece{{-1, "ab"}}, err: pieces.ErrRepeat, piece: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := join(c.cfg, c.end, c.seq)
			if c.err == nil {
				require.NoError(t, err)
				require.Equal(t, c.want, string(got))
				return
			}
			require.ErrorIs(t, err, c.err)
			var pe *pieces.Error
			require.ErrorAs(t, err, &pe)
			if c.piece > 0 {
				require.Equal(t, c.piece, pe.Piece, "the error names the piece: %v", err)
			}
		})
	}
}

func TestJoiner_ByOffset(t *testing.T) {
	reads := pieces.Config{By: pieces.ByOffset, Limit: 10}
	for _, c := range []struct {
		name string
		end  int64
		seq  []piece
		want string
		err  error
	}{
		{name: "in order", end: 5, seq: []piece{{0, "ab"}, {2, "cde"}}, want: "abcde"},
		{name: "one piece", end: 5, seq: []piece{{0, "abcde"}}, want: "abcde"},
		{name: "an empty body", end: 0, seq: []piece{{0, ""}}, want: ""},
		{name: "overlap", end: 5, seq: []piece{{0, "ab"}, {1, "bcde"}}, err: pieces.ErrRepeat},
		{name: "gap", end: 5, seq: []piece{{0, "ab"}, {3, "de"}}, err: pieces.ErrGap},
		{name: "past the total", end: 5, seq: []piece{{0, "ab"}, {2, "cdef"}}, err: pieces.ErrOverrun},
		{name: "stalled", end: 5, seq: []piece{{0, "ab"}, {2, ""}}, err: pieces.ErrEmpty},
		{name: "short", end: 5, seq: []piece{{0, "ab"}}, err: pieces.ErrMissing},
		{name: "a total above the limit", end: 11, err: pieces.ErrTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := join(reads, c.end, c.seq)
			if c.err == nil {
				require.NoError(t, err)
				require.Equal(t, c.want, string(got))
				return
			}
			require.ErrorIs(t, err, c.err)
			require.Contains(t, err.Error(), "piece")
		})
	}
}

func TestJoiner_Expect(t *testing.T) {
	j := pieces.NewJoiner(pieces.Config{By: pieces.ByOffset, Limit: 100})
	require.NoError(t, j.Expect(5, "sha256:a"))
	require.NoError(t, j.Expect(5, "sha256:a"))
	require.ErrorIs(t, j.Expect(6, "sha256:a"), pieces.ErrChanged)
	require.ErrorIs(t, j.Expect(5, "sha256:b"), pieces.ErrChanged)
}

// budget counts what is reserved and refuses past max.
type budget struct{ inUse, max int64 }

var errBusy = errors.New("busy")

func (b *budget) Reserve(n int64) error {
	if b.inUse+n > b.max {
		return errBusy
	}
	b.inUse += n
	return nil
}
func (b *budget) Release(n int64) { b.inUse -= n }

func TestJoiner_Budget(t *testing.T) {
	b := &budget{max: 4}
	j := pieces.NewJoiner(pieces.Config{By: pieces.ByIndex, Budget: b})
	require.NoError(t, j.Expect(3, ""))
	_, err := j.Add(0, []byte("ab"))
	require.NoError(t, err)
	_, err = j.Add(1, []byte("cd"))
	require.NoError(t, err)
	require.Equal(t, int64(4), b.inUse)
	_, err = j.Add(2, []byte("e"))
	require.ErrorIs(t, err, errBusy, "the budget's own error, as it is")
	j.Release(-1)
	require.Zero(t, b.inUse)
}

// source returns the pieces of seq one at a time, then io.EOF, as a Reader's source.
func source(seq []piece) func() (int64, []byte, error) {
	return func() (int64, []byte, error) {
		if len(seq) == 0 {
			return 0, nil, io.EOF
		}
		p := seq[0]
		seq = seq[1:]
		return p.at, []byte(p.data), nil
	}
}

// A Reader holds one piece at a time: what it reserved is the current piece only.
func TestReader(t *testing.T) {
	b := &budget{max: 1 << 20}
	j := pieces.NewJoiner(pieces.Config{By: pieces.ByIndex, Limit: 100, SkipRepeats: true, Budget: b})
	require.NoError(t, j.Expect(3, ""))
	seq := []piece{{0, "abc"}, {1, "de"}, {0, "abc"}, {1, "de"}, {2, "fghi"}}
	r := pieces.NewReader(j, source(seq))
	require.NoError(t, r.Fetch())
	require.Equal(t, "abc", string(r.Current()))
	require.Equal(t, int64(3)+pieces.HashRoom(j), b.inUse, "the piece and its hash's room")
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, "abcdefghi", string(got))
	require.Equal(t, int64(4)+pieces.HashRoom(j), b.inUse, "only the last piece is held")
	j.Release(-1)
	require.Zero(t, b.inUse)
}

func TestReader_Missing(t *testing.T) {
	j := pieces.NewJoiner(pieces.Config{By: pieces.ByIndex})
	require.NoError(t, j.Expect(3, ""))
	seq := []piece{{0, "abc"}, {1, "de"}}
	r := pieces.NewReader(j, source(seq))
	_, err := io.ReadAll(r)
	require.ErrorIs(t, err, pieces.ErrMissing)
	require.Equal(t, err, r.Err())
	var pe *pieces.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, int64(2), pe.Piece, "names the first piece missing: %v", err)
}

// A number the source cannot read is refused naming the piece it stood for.
func TestReader_BadNumber(t *testing.T) {
	j := pieces.NewJoiner(pieces.Config{By: pieces.ByIndex})
	require.NoError(t, j.Expect(2, ""))
	first := true
	r := pieces.NewReader(j, func() (int64, []byte, error) {
		if first {
			first = false
			return 0, []byte("a"), nil
		}
		n, err := pieces.ParseNumber("Cp-Chunk", "one")
		return n, []byte("b"), err
	})
	_, err := io.ReadAll(r)
	require.ErrorIs(t, err, pieces.ErrNumber)
	require.Contains(t, err.Error(), "piece 1")
	require.Contains(t, err.Error(), `Cp-Chunk: "one"`)
}

func TestSplitJoin_RoundTrip(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 1000)
	for _, size := range []int64{1, 7, 4096, 10000, 20000} {
		ps, err := pieces.Split(body, size)
		require.NoError(t, err)
		j := pieces.NewJoiner(pieces.Config{By: pieces.ByIndex, Limit: int64(len(body))})
		require.NoError(t, j.Expect(int64(len(ps)), ""))
		for i, p := range ps {
			_, err := j.Add(int64(i), p)
			require.NoError(t, err)
		}
		got, err := j.Finish()
		require.NoError(t, err)
		require.Equal(t, body, got)

		o := pieces.NewJoiner(pieces.Config{By: pieces.ByOffset, Limit: int64(len(body))})
		require.NoError(t, o.Expect(int64(len(body)), ""))
		for !o.Done() {
			p, err := pieces.Cut(body, o.Next(), size)
			require.NoError(t, err)
			_, err = o.Add(o.Next(), p)
			require.NoError(t, err)
		}
		got, err = o.Finish()
		require.NoError(t, err)
		require.Equal(t, body, got)
	}
}

// BenchmarkJoiner_ByOffset joins a 2.3 MB body from replies of a 1 MiB max_payload, as the SDK
// does, beside plain appends of the same pieces (the floor): the checks cost no copy.
func BenchmarkJoiner_ByOffset(b *testing.B) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 2300<<10/16)
	size := pieces.Size(1<<20, pieces.ReplyRoom)
	ps, _ := pieces.Split(body, size)
	b.Run("joiner", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			j := pieces.NewJoiner(pieces.Config{By: pieces.ByOffset, Limit: int64(len(body))})
			for _, p := range ps {
				if err := j.Expect(int64(len(body)), "tag"); err != nil {
					b.Fatal(err)
				}
				if _, err := j.Add(j.Next(), p); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := j.Finish(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			out := make([]byte, 0, min(len(body), 16*len(ps[0])))
			for _, p := range ps {
				out = append(out, p...)
			}
			_ = out
		}
	})
}

func TestJoin(t *testing.T) {
	got, err := pieces.Join([][]byte{[]byte("ab"), []byte("cd"), []byte("e")}, 0)
	require.NoError(t, err)
	require.Equal(t, "abcde", string(got))
	_, err = pieces.Join([][]byte{[]byte("ab"), {}, []byte("e")}, 0)
	require.ErrorIs(t, err, pieces.ErrEmpty)
	_, err = pieces.Join([][]byte{[]byte("ab"), []byte("cd")}, 3)
	require.ErrorIs(t, err, pieces.ErrTooLarge)
}

// TestReader_RepeatsMustMatch: a repeat skipped is a resend of the piece taken at its index, byte
// for byte; a "repeat" with other bytes, also one after the announced end is reached (the pieces
// of an earlier attempt followed by those of another body), is ErrChanged, and a piece past the
// end after it ErrOverrun: the body is never joined from the pieces of two bodies.
func TestReader_RepeatsMustMatch(t *testing.T) {
	type piece struct {
		at   int64
		data string
	}
	read := func(ps ...piece) ([]byte, error) {
		i := 0
		j := pieces.NewJoiner(pieces.Config{By: pieces.ByIndex, Limit: 100, SkipRepeats: true})
		require.NoError(t, j.Expect(2, ""))
		r := pieces.NewReader(j, func() (int64, []byte, error) {
			if i == len(ps) {
				return 0, nil, io.EOF
			}
			i++
			return ps[i-1].at, []byte(ps[i-1].data), nil
		})
		return io.ReadAll(r)
	}
	got, err := read(piece{0, "ab"}, piece{0, "ab"}, piece{1, "cd"}, piece{0, "ab"}, piece{1, "cd"})
	require.NoError(t, err, "resends of the same pieces are skipped")
	require.Equal(t, "abcd", string(got))

	_, err = read(piece{0, "ab"}, piece{0, "xy"}, piece{1, "cd"})
	require.ErrorIs(t, err, pieces.ErrChanged, "a repeat with other bytes")
	_, err = read(piece{0, "ab"}, piece{1, "cd"}, piece{0, "xy"}, piece{1, "zz"})
	require.ErrorIs(t, err, pieces.ErrChanged, "another body's pieces after the end")
	_, err = read(piece{0, "ab"}, piece{1, "cd"}, piece{2, "ef"})
	require.ErrorIs(t, err, pieces.ErrOverrun, "a piece past the end")
}

// A chunk after the end whose number cannot be read is refused naming its place, as before it.
func TestReader_BadNumberAfterTheEnd(t *testing.T) {
	j := pieces.NewJoiner(pieces.Config{By: pieces.ByIndex, Limit: 100, SkipRepeats: true})
	require.NoError(t, j.Expect(1, ""))
	calls := 0
	r := pieces.NewReader(j, func() (int64, []byte, error) {
		calls++
		if calls == 1 {
			return 0, []byte("ab"), nil
		}
		_, err := pieces.ParseNumber("Cp-Chunk", "01")
		return 0, nil, err
	})
	_, err := io.ReadAll(r)
	require.ErrorIs(t, err, pieces.ErrNumber)
	var pe *pieces.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, int64(1), pe.Piece, "%v", err)
}
