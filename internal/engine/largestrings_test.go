package engine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
)

// sizedString returns a JSON string literal of exactly n bytes (quotes included) made of unit,
// cut short with plain letters.
func sizedString(n int, unit string) string {
	body := strings.Repeat(unit, (n-2)/len(unit))
	return `"` + body + strings.Repeat("A", n-2-len(body)) + `"`
}

// hostileValueMessages returns messages whose strings sit at the value threshold (ValueMinBytes,
// quotes included) one byte under, at and over it: base64 (stored as values), base64 written with
// escapes (\/ is a slash: still opaque), text with escapes (kept), member names that long, in tool
// arguments, images, and nested deep.
func hostileValueMessages() [][]byte {
	min := engine.ValueMinBytes
	b64 := "QUJD/+Rk"
	var out [][]byte
	add := func(s string) { out = append(out, []byte(s)) }
	for _, n := range []int{min - 1, min, min + 1} {
		add(`{"role":"user","content":[{"type":"image","data":` + sizedString(n, b64) + `,"mimeType":"image/png"}]}`)
		add(`{"role":"user","content":` + sizedString(n, `\"x\\`) + `}`)
		add(`{"role":"user","content":[{"type":"text","text":` + sizedString(n, `QUJD\/`) + `}]}`)
		add(`{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"write","arguments":{"path":"a.png","data":` +
			sizedString(n, b64) + `,` + sizedString(n, "K") + `:1}}]}`)
		add(`{"role":"toolResult","toolCallId":"c","content":[{"type":"text","text":"ok"}],"details":` +
			strings.Repeat(`{"a":[`, 40) + sizedString(n, b64) + strings.Repeat(`]}`, 40) + `}`)
	}
	return out
}

// A save finds the strings it stores as values from what validating its payload noted, not by a
// second pass: on every path a save takes (first save, a whole array that grew, an append on a
// base, a rewrite), the plan's large strings must be what codec.LargeStrings finds in the bytes
// the save stores, and the versions must read back as saved.
func TestSave_LargeStringsAsScanned(t *testing.T) {
	files, err := filepath.Glob("../../testdata/corpus/*.json")
	require.NoError(t, err)
	convs := map[string][][]byte{"hostile": hostileValueMessages()}
	for _, f := range files {
		in, err := os.ReadFile(f)
		require.NoError(t, err)
		c, err := codec.Parse(in)
		require.NoError(t, err)
		for _, m := range c.Messages {
			convs[filepath.Base(f)] = append(convs[filepath.Base(f)], m)
		}
	}
	for name, msgs := range convs {
		t.Run(name, func(t *testing.T) {
			e, _ := newEngine(t, 8<<20, engine.Config{})
			key := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
			n := len(msgs)
			half, most := n/2, n-1
			saves := []struct {
				what string
				req  engine.SaveRequest
			}{
				{"first save", engine.SaveRequest{Payload: arrayOf(msgs[:half])}},
				{"the whole array, grown", engine.SaveRequest{Payload: arrayOf(msgs[:most])}},
				{"an append on a base", engine.SaveRequest{Base: u64(2), Payload: arrayOf(msgs[most:])}},
				{"a rewrite", engine.SaveRequest{Payload: arrayOf(append(msgs[:half-1:half-1], msgs[half:]...))}},
			}
			var want [][]byte
			stored := 0
			for _, sv := range saves {
				req := sv.req
				req.Key = key
				raw, large, values, err := engine.PlanLargeStrings(ctx, e, req)
				require.NoError(t, err, sv.what)
				require.Equal(t, codec.LargeStrings(raw, engine.ValueMinBytes), large, "%s: the large strings", sv.what)
				require.LessOrEqual(t, len(values), len(large), sv.what)
				stored += len(values)
				_, err = save(e, req)
				require.NoError(t, err, sv.what)
				want = append(want, sv.req.Payload)
			}
			if name == "hostile" { // the corpus's large strings are text, which stays in its piece
				require.NotZero(t, stored, "values cut out")
			}
			want[2] = arrayOf(msgs) // the append's version is the whole conversation
			for v, w := range want {
				got, _, err := e.Read(ctx, key, uint64(v+1), engine.ReadOptions{Verify: true})
				require.NoError(t, err, "version %d", v+1)
				require.True(t, string(w) == string(got), "version %d reads back as saved", v+1)
			}
		})
	}
}

func arrayOf(msgs [][]byte) []byte {
	out := []byte{'['}
	for i, m := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return append(out, ']')
}
