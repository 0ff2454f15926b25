package logtest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// RunDataReader runs the cases of engine.DataReader against logs made by newLog (as Run), which
// must implement it.
func RunDataReader(t *testing.T, newLog func(t *testing.T) engine.Log) {
	t.Run("ReadData/CountsAfterAndOwnLogOnly", func(t *testing.T) {
		l := newLog(t)
		dr, ok := l.(engine.DataReader)
		require.True(t, ok, "the log implements engine.DataReader")
		a, b := key("ns", "a"), key("ns", "b")
		var as []engine.Entry
		for i := range 6 { // interleaved with another log's entries: sequences with gaps
			as = append(as, appendN(t, l, a, fmt.Sprintf("a%d", i), 1)...)
			appendN(t, l, b, fmt.Sprintf("b%d", i), 1)
		}
		read := func(after uint64, n int, stopAt int) [][]byte {
			var out [][]byte
			require.NoError(t, dr.ReadData(ctxOf(t), a, after, n, func(d []byte) bool {
				out = append(out, bytes.Clone(d))
				return len(out) != stopAt
			}))
			return out
		}
		datas := func(es []engine.Entry) [][]byte {
			var out [][]byte
			for _, e := range es {
				out = append(out, e.Data)
			}
			return out
		}
		require.Equal(t, datas(as), read(0, 100, -1), "every entry")
		require.Equal(t, datas(as[2:5]), read(as[1].Seq, 3, -1), "three after the second")
		require.Equal(t, datas(as[2:5]), read(as[1].Seq+1, 3, -1), "after a sequence of another log")
		require.Equal(t, datas(as[5:]), read(as[4].Seq, 10, -1), "fewer than asked")
		require.Empty(t, read(as[5].Seq, 10, -1), "none after the last")
		require.Empty(t, read(0, 0, -1), "none asked")
		require.Equal(t, datas(as[:2]), read(0, 10, 2), "fn stops it")
		require.NoError(t, l.Delete(ctxOf(t), a, as[2].Seq))
		soon(t, func() error {
			if got := read(as[1].Seq, 2, -1); !equalDatas(got, datas([]engine.Entry{as[3], as[4]})) {
				return fmt.Errorf("after a delete: %q", got)
			}
			return nil
		})
	})
}

func equalDatas(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
