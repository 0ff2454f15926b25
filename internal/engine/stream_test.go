package engine

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func testMessage(i int) []byte {
	return []byte(fmt.Sprintf(`{"role":"user","content":"turn %d: %s"}`, i, strings.Repeat("the quick brown fox ", 1+i%7)))
}

// A piece whose bytes do not match its CRC-32C is refused, in a run decoded in place or not.
func TestLogBuilder_CRC(t *testing.T) {
	enc, err := newEncoder(1<<20, true)
	require.NoError(t, err)
	var pieces []*pieceInfo
	var datas [][]byte
	want := "["
	for i := range 3 {
		raw := testMessage(i)
		if i > 0 {
			raw = append([]byte{','}, raw...)
		}
		want += string(raw)
		data, err := enc.add(raw)
		require.NoError(t, err)
		pieces = append(pieces, &pieceInfo{Messages: 1, RawBytes: int64(len(raw)), CRC: crc32.Checksum(raw, castagnoli), Frame: i == 0})
		datas = append(datas, append([]byte(nil), data...))
	}
	build := func(capacity int) ([]byte, error) {
		lb := logBuilder{out: append(make([]byte, 0, capacity), '[')}
		for i := range pieces {
			if err := lb.add(pieces[i], datas[i]); err != nil {
				return nil, err
			}
		}
		return lb.result()
	}
	for _, capacity := range []int{len(want) + 8, 1} { // room to decode in place, or not
		got, err := build(capacity)
		require.NoError(t, err)
		require.Equal(t, want, string(got))
		pieces[1].CRC++
		_, err = build(capacity)
		require.ErrorIs(t, err, ErrCorrupt)
		pieces[1].CRC--
	}
}

// Saves compress at zstd's fastest level with FastSaves (§8.19 item 3): the stream differs.
func TestEncoder_FastSaves(t *testing.T) {
	words := strings.Fields("the engine stores every version of a conversation as entries of one log per session " +
		"with a compare and swap on the last entry so that two daemons never give one number twice")
	rng := rand.New(rand.NewPCG(1, 2))
	var msgs [][]byte
	for range 60 {
		var b strings.Builder
		for range 200 {
			b.WriteString(words[rng.IntN(len(words))] + " ")
		}
		msgs = append(msgs, []byte(b.String()))
	}
	stream := func(fast bool) []byte {
		enc, err := newEncoder(1<<20, fast)
		require.NoError(t, err)
		var out []byte
		for _, m := range msgs {
			data, err := enc.add(m)
			require.NoError(t, err)
			out = append(out, data...)
		}
		return out
	}
	require.NotEqual(t, stream(true), stream(false), "saves at SpeedFastest stored the default level's bytes")
	require.Equal(t, stream(true), stream(true))
}
