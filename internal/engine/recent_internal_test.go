package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRecentRecords_Find(t *testing.T) {
	var r recentRecords
	r.add(Record{Version: 1, SaveID: "a"})
	_, ok := r.find("a", 1, 10)
	require.False(t, ok, "added before the records were known")

	r.set([]Record{{Version: 1, SaveID: "a"}, {Version: 2, SaveID: "b"}})
	r.add(Record{Version: 3, SaveID: "a"}) // a save id found twice: an import, say
	rec, ok := r.find("a", 1, 3)
	require.True(t, ok)
	require.Equal(t, uint64(3), rec.Version, "the newest in range")
	rec, ok = r.find("a", 1, 2)
	require.True(t, ok)
	require.Equal(t, uint64(1), rec.Version, "the newest is out of range: an older one is found")
	_, ok = r.find("b", 3, 3)
	require.False(t, ok)
	_, ok = r.find("c", 1, 3)
	require.False(t, ok)

	r.reset(true)
	_, ok = r.find("a", 1, 3)
	require.False(t, ok, "reset forgets")
	r.add(Record{Version: 4, SaveID: "d"})
	rec, ok = r.find("d", 1, 4)
	require.True(t, ok)
	require.Equal(t, uint64(4), rec.Version)
}
