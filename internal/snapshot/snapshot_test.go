package snapshot

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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

func TestValueSpans_OpaqueDataAndHugeText(t *testing.T) {
	b64 := strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA+/9=", 2000)           // 56 KB of base64
	text := strings.Repeat(`line of a tool output\n\"quoted\"\t`, 1500)   // 54 KB of text
	huge := strings.Repeat(`a long log line\n`, (TextValueMinBytes/17)+1) // over 1 MiB of text
	raw := []byte(`{"role":"toolResult","content":[{"type":"image","data":"` + b64 + `"},` +
		`{"type":"image","data":"data:image/png;base64,` + b64 + `"},{"type":"text","text":"` + text + `"},` +
		`{"type":"text","text":"` + huge + `"}]}`)
	var got []string
	for _, sp := range valueSpans(raw) {
		got = append(got, string(raw[sp[0]:sp[0]+12]))
	}
	require.Equal(t, []string{`"iVBORw0KGgo`, `"data:image/`, `"a long log `}, got, "the 54 KB of text stays in its segment")
}

func TestRecordIn_FindsAVersionInAnArchive(t *testing.T) {
	var recs []Version
	for n := uint64(3); n <= 40; n++ {
		recs = append(recs, Version{Version: n, Writer: fmt.Sprint("w", n), Hash: "sha256:x"})
	}
	raw, err := json.Marshal(recs)
	require.NoError(t, err)
	for _, n := range []uint64{3, 4, 21, 39, 40} {
		v, ok, err := recordIn(raw, n)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, recs[n-3], v)
	}
	for _, n := range []uint64{1, 2, 41} {
		_, ok, err := recordIn(raw, n)
		require.NoError(t, err)
		require.False(t, ok, "version %d", n)
	}
	_, _, err = recordIn([]byte(`[{"version":"x"}]`), 1)
	require.Error(t, err)
	_, _, err = recordIn([]byte(`{}`), 1)
	require.Error(t, err)
	_, ok, err := recordIn([]byte(`[]`), 1)
	require.NoError(t, err)
	require.False(t, ok)
}

// matchSegment, which compares a save with the head without reading the head's values back, counts
// exactly the leading messages that are byte for byte the segment's: checked against a plain
// comparison on random segments and random edits of them (messages changed, cut, lengthened,
// swapped, removed, added; images changed by one byte or replaced). Messages are JSON objects, as
// the parser hands them over: that is what lets a match end only where the segment's message ends.
func TestMatchSegment_AgreesWithAByteComparison(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	images := make([]string, 4)
	for i := range images {
		b := make([]byte, 26<<10) // 34.7 KB of base64: above ValueMinBytes
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		images[i] = base64.StdEncoding.EncodeToString(b)
	}
	message := func() string {
		switch rng.IntN(4) {
		case 0:
			return `{"role":"user","content":[{"type":"image","data":"` + images[rng.IntN(len(images))] + `"}]}`
		case 1:
			return `{"role":"user","content":[{"type":"text","text":"x"},{"type":"image","data":"` + images[rng.IntN(len(images))] +
				`"},{"type":"image","data":"` + images[rng.IntN(len(images))] + `"}]}`
		default:
			return fmt.Sprintf(`{"role":"user","content":"%d"}`, rng.IntN(3))
		}
	}
	edit := func(in []string) []string {
		out := slices.Clone(in)
		if len(out) == 0 {
			return append(out, message())
		}
		i := rng.IntN(len(out))
		switch rng.IntN(8) {
		case 0:
			out[i] = message()
		case 1, 2: // an image changed by one byte, or cut short; a text changed
			var img string
			for _, im := range images {
				if strings.Contains(out[i], im) {
					img = im
				}
			}
			switch {
			case img == "":
				out[i] = fmt.Sprintf(`{"role":"user","content":"%d"}`, 3+rng.IntN(3))
			case rng.IntN(2) == 0:
				b := []byte(img)
				b[rng.IntN(len(b))] = "ABCD"[rng.IntN(4)]
				out[i] = strings.Replace(out[i], img, string(b), 1)
			default:
				out[i] = strings.Replace(out[i], img, img[:rng.IntN(len(img))], 1)
			}
		case 3: // lengthened: the same bytes and more
			out[i] = out[i][:len(out[i])-1] + `,"x":1}`
		case 4: // swapped
			j := rng.IntN(len(out))
			out[i], out[j] = out[j], out[i]
		case 5:
			out = out[:i]
		case 6:
			out = slices.Insert(out, i, message())
		case 7:
			out = append(out, message())
		}
		return out
	}
	raws := func(ss []string) []json.RawMessage {
		out := make([]json.RawMessage, len(ss))
		for i, s := range ss {
			out[i] = json.RawMessage(s)
		}
		return out
	}
	matched, withValues := 0, 0
	for range 2000 {
		stored := make([]string, 1+rng.IntN(6))
		for i := range stored {
			stored[i] = message()
		}
		raw := []byte(strings.Join(stored, ","))
		ref := SegmentRef{Messages: len(stored), RawBytes: int64(len(raw))}
		var stripped []byte
		at := 0
		for _, sp := range valueSpans(raw) {
			sum := sha256.Sum256(raw[sp[0]:sp[1]])
			ref.Values = append(ref.Values, ValueRef{ID: hex.EncodeToString(sum[:]), At: int64(sp[0]), RawBytes: int64(sp[1] - sp[0])})
			stripped, at = append(stripped, raw[at:sp[0]]...), sp[1]
		}
		stripped = append(stripped, raw[at:]...)
		if len(ref.Values) > 0 {
			withValues++
		}

		other := stored
		for range 1 + rng.IntN(3) {
			other = edit(other)
		}
		other = other[:min(len(other), len(stored))]
		want := 0
		for want < len(other) && other[want] == stored[want] {
			want++
		}
		short := func(ss []string) (o []string) {
			for _, s := range ss {
				if len(s) > 80 {
					s = fmt.Sprintf("%s…%s (%d)", s[:60], s[len(s)-10:], len(s))
				}
				o = append(o, s)
			}
			return o
		}
		require.Equal(t, want, matchSegment(stripped, ref, raws(other)), "stored %q, compared %q", short(stored), short(other))
		if want == len(other) {
			matched++
		}
		require.Equal(t, len(stored), matchSegment(stripped, ref, raws(stored)), "a segment matches itself")
	}
	require.Greater(t, matched, 100, "some edits keep every message compared")
	require.Greater(t, withValues, 1300, "most segments hold values")
}
