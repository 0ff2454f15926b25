package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A group entry's bits are refused where they do not belong, and a group that does not end right
// below its entry's head version is refused: ErrCorrupt, never a panic or versions out of order.
func TestEntry_GroupRefusals(t *testing.T) {
	group := testEntries(t)["group"]
	b, err := encodeEntry(group.meta, nil)
	require.NoError(t, err)
	require.Equal(t, byte(flag2Group|flag2Extra), b[6]&(flag2Group|flag2Extra))

	wrongEnd := group.meta
	wrongEnd.Head.Version = 4
	_, err = encodeEntry(wrongEnd, nil)
	require.Error(t, err, "a group ending at 2 in an entry of version 4 is not written")

	state, err := encodeEntry(testEntries(t)["state after a group"].meta, nil)
	require.NoError(t, err)
	pack, err := encodeEntry(testEntries(t)["pack, compact state"].meta, nil)
	require.NoError(t, err)
	flags2 := func(b []byte, f byte) []byte {
		out := append([]byte(nil), b...)
		out[6] |= f
		return out
	}
	for name, bad := range map[string][]byte{
		"group flag on a state":  flags2(state, flag2Group),
		"extra flag on a pack":   flags2(pack, flag2Extra),
		"group cut":              b[:len(b)-3],
		"a save naming a group":  flags2(mustEncode(t, testEntries(t)["save, compact state"].meta), flag2Group),
		"a group of one version": regroup(t, group.meta, 1),
	} {
		_, _, err := decodeEntry(bad)
		require.ErrorIs(t, err, ErrCorrupt, name)
	}
}

func mustEncode(t *testing.T, m entryMeta) []byte {
	t.Helper()
	b, err := encodeEntry(m, nil)
	require.NoError(t, err)
	return b
}

// regroup is m encoded with a group of n versions ending at version 2, while its head is version 3
// + (2 - n): for n = 1, a group ending two below the head (version 1 in an entry of version 3).
func regroup(t *testing.T, m entryMeta, n int) []byte {
	t.Helper()
	m.Group = m.Group[:n]
	m.Head.Version = m.Group[n-1].Record.Version + 1
	b := mustEncode(t, m)
	// The head's version is the first field after the flags (a one-byte varint here): make it 3.
	require.Equal(t, byte(m.Head.Version), b[7])
	b[7] = 3
	return b
}
