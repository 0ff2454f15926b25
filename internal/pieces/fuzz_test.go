package pieces_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/pieces"
)

// FuzzJoiner sends a Joiner (and a Reader) hostile piece sequences: an honest body's pieces
// resent, skipped, renumbered, emptied, replaced by other bytes, under a wrong announced end, a
// limit and a budget. Whatever comes, it never panics; every refusal is a typed *Error naming
// the piece (or the budget's own error); a piece is taken only if it carries the number expected
// next; what was received never passes the limit nor the budget; and the body it returns is
// exactly the pieces taken, of the announced end.
// `go test -fuzz FuzzJoiner -run XXX ./internal/pieces/` explores.
func FuzzJoiner(f *testing.F) {
	f.Add([]byte("abcdefghij"), []byte{0, 1}, []byte{0, 0, 0, 0}, false, true, uint16(0), int8(0), uint16(0), false)
	f.Add([]byte("abcdefghij"), []byte{0}, []byte{0, 0, 1, 0, 12, 0, 0}, false, true, uint16(9), int8(0), uint16(3), true)
	f.Add([]byte("abcdefghij"), []byte{1}, []byte{0, 2, 3, 9, 4, 5}, true, false, uint16(0), int8(1), uint16(0), false)
	f.Add(bytes.Repeat([]byte{7}, 300), []byte{2, 0}, []byte{0, 0, 0, 0, 0, 0, 0}, true, false, uint16(100), int8(-1), uint16(200), false)
	f.Add([]byte{}, []byte{}, []byte{0, 4}, true, false, uint16(0), int8(0), uint16(0), false)
	f.Fuzz(func(t *testing.T, body, cuts, ops []byte, byOffset, skip bool, limit uint16, endShift int8, budgetMax uint16, reader bool) {
		by := pieces.ByIndex
		if byOffset {
			by, reader = pieces.ByOffset, false // a Reader is for pieces by index (a save's chunks)
		}
		honest := cut(body, cuts)
		offsets := make([]int64, len(honest)+1)
		for i, p := range honest {
			offsets[i+1] = offsets[i] + int64(len(p))
		}
		number := func(k int) int64 { // what piece k of the honest sequence carries
			if by == pieces.ByOffset {
				return offsets[min(k, len(honest))]
			}
			return int64(k)
		}
		end := int64(len(honest)) + int64(endShift%3)
		if by == pieces.ByOffset {
			end = int64(len(body)) + int64(endShift%3)
		}
		seq := hostile(honest, number, ops)

		b := &budget{max: int64(budgetMax)}
		if budgetMax == 0 {
			b.max = 1 << 40
		}
		j := pieces.NewJoiner(pieces.Config{By: by, Limit: int64(limit), SkipRepeats: skip, Budget: b})
		max := int64(limit)
		if max == 0 {
			max = 1 << 62
		}
		if err := j.Expect(end, "tag"); err != nil {
			require.True(t, end < 0 || end > max, "an end refused only when the limit cannot hold it: %v", err)
			requireTyped(t, err)
			return
		}
		var model []byte // the pieces taken, joined
		var err error
		if reader {
			model, err = readAll(t, j, seq, b)
		} else {
			for _, p := range seq {
				next, before := j.Next(), j.Received()
				var ok bool
				if ok, err = j.Add(p.at, []byte(p.data)); err != nil {
					break
				}
				if ok {
					require.Equal(t, next, p.at, "taken only with the number expected next")
					require.Equal(t, before+int64(len(p.data)), j.Received())
					model = append(model, p.data...)
				}
				require.Equal(t, int64(len(model))+pieces.HashRoom(j), b.inUse, "the budget holds every byte taken, and the room of their hashes")
			}
		}
		require.LessOrEqual(t, j.Received(), max, "never more than the limit")
		require.LessOrEqual(t, b.inUse, b.max, "never more than the budget")
		if err != nil {
			if !errors.Is(err, errBusy) {
				requireTyped(t, err)
			}
		} else if got, ferr := j.Finish(); ferr != nil {
			require.ErrorIs(t, ferr, pieces.ErrMissing)
			require.False(t, j.Done())
		} else if !reader {
			require.True(t, bytes.Equal(model, got), "the body is the pieces taken")
		}
		if j.Done() && by == pieces.ByOffset {
			require.Equal(t, end, j.Received(), "a body of the announced length")
		}
		j.Release(-1)
		require.Zero(t, b.inUse, "the budget is given back whole")
	})
}

// readAll reads seq through a Reader and returns what it read: at most one piece is held.
func readAll(t *testing.T, j *pieces.Joiner, seq []piece, b *budget) ([]byte, error) {
	r := pieces.NewReader(j, source(seq))
	var out []byte
	buf := make([]byte, 3)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		require.LessOrEqual(t, b.inUse, int64(len(r.Current()))+j.Received()+pieces.HashRoom(j), "")
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			require.Equal(t, err, r.Err(), "a failure of the pieces is kept")
			return out, err
		}
	}
}

// requireTyped checks that err is a typed refusal naming a piece.
func requireTyped(t *testing.T, err error) {
	var pe *pieces.Error
	require.ErrorAs(t, err, &pe, "%v", err)
	require.NotNil(t, pe.Err)
	require.Contains(t, err.Error(), "piece")
}

// hostile turns the honest pieces into what a hostile or broken sender sends, one op at a time:
// the next piece, an earlier one again, none (a gap), the next one misnumbered, an empty one,
// other bytes under the next number.
func hostile(honest [][]byte, number func(k int) int64, ops []byte) []piece {
	var seq []piece
	k := 0
	honestAt := func(k int) string {
		if k < len(honest) {
			return string(honest[k])
		}
		return "x" // past the end: a piece the sender never had
	}
	for _, op := range ops {
		arg := int(op / 6)
		switch op % 6 {
		case 0:
			seq = append(seq, piece{number(k), honestAt(k)})
			k++
		case 1:
			if k > 0 {
				r := arg % k
				seq = append(seq, piece{number(r), honestAt(r)})
			}
		case 2:
			k++
		case 3:
			seq = append(seq, piece{number(k) + int64(arg%5) - 2, honestAt(k)})
		case 4:
			seq = append(seq, piece{number(k), ""})
		case 5:
			seq = append(seq, piece{number(k), string(bytes.Repeat([]byte{op}, arg+1))})
			k++
		}
	}
	return seq
}

// cut splits data into pieces whose lengths cuts gives in turn (each byte plus one; the last
// piece takes the rest). No cuts: one piece.
func cut(data []byte, cuts []byte) [][]byte {
	var out [][]byte
	for i := 0; len(data) > 0; i++ {
		n := len(data)
		if len(cuts) > 0 {
			n = min(n, int(cuts[i%len(cuts)])+1)
		}
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}
