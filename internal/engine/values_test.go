package engine_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

func image(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

func imageMessage(i int, img string) []byte {
	return []byte(fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":"look %d"},{"type":"image","data":%q,"mimeType":"image/png"}]}`, i, img))
}

// Large values are stored once per namespace, put back on every read (in packs, after rewrites,
// after a restart), and a value too large for one entry stays in its piece.
func TestValues(t *testing.T) {
	e, log := newEngine(t, 96<<10, engine.Config{PackEntries: 3})
	a, b := engine.Key{Namespace: "n", Session: "a", Agent: "x"}, engine.Key{Namespace: "n", Session: "b", Agent: "x"}
	img1, img2, huge := image(40<<10), image(30<<10), image(200<<10) // 53 KB, 40 KB, 267 KB of base64
	var conv [][]byte
	var want []string
	for i := range 8 {
		m := message(i)
		switch i {
		case 1, 5:
			m = imageMessage(i, img1)
		case 3:
			m = imageMessage(i, img2)
		case 6:
			m = imageMessage(i, huge)
		}
		conv = append(conv, m)
		want = append(want, "["+string(joinAll(conv))+"]")
		s, err := save(e, engine.SaveRequest{Key: a, SaveID: fmt.Sprint(i), Payload: []byte(want[i])})
		require.NoError(t, err)
		if i == 1 {
			require.Greater(t, s.Record.StoredBytes, int64(40<<10), "the value's blob is counted where it was written")
		}
		if i == 5 {
			require.Less(t, s.Record.StoredBytes, int64(1<<10), "a value already stored costs nothing")
		}
		if s.PackDue {
			_, err := e.Pack(ctx, a, false)
			require.NoError(t, err)
		}
	}
	// Another session of the namespace sending the same image stores no new value.
	_, err := save(e, engine.SaveRequest{Key: b, SaveID: "b", Payload: []byte("[" + string(imageMessage(0, img1)) + "]")})
	require.NoError(t, err)
	// A rewrite that drops the first image message.
	rw := "[" + string(joinAll(append([][]byte{conv[0]}, conv[2:]...))) + "]"
	_, err = save(e, engine.SaveRequest{Key: a, SaveID: "rw", Payload: []byte(rw)})
	require.NoError(t, err)
	want = append(want, rw)

	var ids []string
	require.NoError(t, log.Values(ctx, "n", func(id string) bool { ids = append(ids, id); return true }))
	require.Len(t, ids, 2, "img1 and img2 once each; the huge one stays in its piece")

	for _, cold := range []bool{false, true} {
		if cold {
			e.Forget()
			_, err := e.Pack(ctx, a, true)
			require.NoError(t, err)
		}
		for v, w := range want {
			got, _, err := e.Read(ctx, a, uint64(v+1), engine.ReadOptions{Verify: true})
			require.NoError(t, err, "version %d", v+1)
			require.True(t, w == string(got), "version %d", v+1)
		}
	}
	got, _, err := e.Read(ctx, b, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Contains(t, string(got), img1)

	// A value gone from the store is corruption, named.
	require.NoError(t, log.DeleteValue(ctx, "n", ids[0]))
	require.NoError(t, log.DeleteValue(ctx, "n", ids[1]))
	_, _, err = e.Read(ctx, a, 2, engine.ReadOptions{})
	require.ErrorIs(t, err, engine.ErrCorrupt)
	require.ErrorContains(t, err, "is missing")
}
