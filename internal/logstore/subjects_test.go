package logstore

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// The subjects are the stored format (docs/format.md §8.2): the log spells its ids with the
// protocol's id encoding (wire.EncodeID, docs/protocol.md §2), and stores keep these names for
// ever. A change to that encoding made for the protocol's sake is a storage change too, which
// needs an upgrade of every store: it fails here first.
func TestSubjects_AreTheStoredNames(t *testing.T) {
	k := engine.Key{Namespace: "user@example.com", Session: "a.b*c >d", Agent: "main"}
	log, err := LogSubject(k)
	require.NoError(t, err)
	require.Equal(t, "cp.log.user=40example=2Ecom.a=2Eb=2Ac=20=3Ed.main", log)
	idx, err := indexSubject(k.Namespace)
	require.NoError(t, err)
	require.Equal(t, "cp.idx.user=40example=2Ecom", idx)
	require.Equal(t, "a=2Eb=2Ac=20=3Ed.main", indexToken(k))
	val, err := valueSubject(k.Namespace, "0123abcd")
	require.NoError(t, err)
	require.Equal(t, "cp.val.user=40example=2Ecom.0123abcd", val)

	for _, bad := range []engine.Key{{Session: "s", Agent: "main"}, {Namespace: "n", Session: string([]byte{0xff}), Agent: "main"}} {
		_, err := LogSubject(bad)
		require.Error(t, err, "%q", bad)
	}
}
