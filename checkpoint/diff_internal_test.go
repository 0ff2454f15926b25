package checkpoint

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func msgs(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func TestDiffMessages(t *testing.T) {
	ops := func(cs []Change) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Op+":"+string(rune('0'+c.Index)))
		}
		return out
	}
	require.Empty(t, diffMessages(msgs("a", "b"), msgs("a", "b")))
	require.Equal(t, []string{"added:2", "added:3"}, ops(diffMessages(msgs("a", "b"), msgs("a", "b", "c", "d"))))
	require.Equal(t, []string{"changed:1"}, ops(diffMessages(msgs("a", "b", "c"), msgs("a", "X", "c"))))
	require.Equal(t, []string{"removed:1"}, ops(diffMessages(msgs("a", "b", "c"), msgs("a", "c"))))
	require.Equal(t, []string{"changed:1", "added:2"}, ops(diffMessages(msgs("a", "b", "c"), msgs("a", "X", "Y", "c"))))
	d := diffMessages(msgs("a", "b"), msgs("a", "c"))
	require.Equal(t, "b", string(d[0].Old))
	require.Equal(t, "c", string(d[0].New))
}
