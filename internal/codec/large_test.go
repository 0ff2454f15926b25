package codec

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// largeMins are the thresholds the large strings are compared at: the engine's (32 KiB), the
// smallest the scan notes (tapedString) and one above, and one below it (read again).
var largeMins = []int{32 << 10, tapedString, tapedString + 1, 1000, tapedString - 1}

// requireLargeAsScanned checks that what the parse noted of payload's large strings is what
// reading the canonical bytes again finds, for every range of messages cut where the engine cuts
// them (the whole, a tail, a head, one message).
func requireLargeAsScanned(t *testing.T, payload []byte, lim Limits, min int) {
	t.Helper()
	lim.LargeStrings = min
	c, err := ParseLimited(payload, lim)
	require.NoError(t, err)
	n := len(c.Messages)
	ranges := [][2]int{{0, n}, {n / 2, n}, {n - 1, n}, {0, n / 2}, {n / 3, n/3 + 1}, {n, n}}
	for _, r := range ranges {
		span := c.Span(r[0], r[1])
		want := LargeStrings(span, min)
		got := c.LargeStrings(r[0], r[1], min)
		require.Equal(t, want, got, "messages %d..%d, min %d", r[0], r[1], min)
	}
}

// The large strings a save stores as values are found by the scan that validates the payload, not
// by a second pass; they must be exactly the ones the second pass finds, on the real corpus as
// sent compact or spaced (the two scans that note them).
func TestLargeStrings_AsScanned_Corpus(t *testing.T) {
	files, err := filepath.Glob("../../testdata/corpus/*.json")
	require.NoError(t, err)
	require.Len(t, files, 8)
	found := 0
	for _, f := range files {
		spaced, err := os.ReadFile(f)
		require.NoError(t, err)
		compact, err := canonical(spaced)
		require.NoError(t, err)
		for _, min := range largeMins {
			requireLargeAsScanned(t, spaced, Limits{}, min)
			requireLargeAsScanned(t, compact, Limits{}, min)
		}
		found += len(LargeStrings(compact, 32<<10))
	}
	require.Greater(t, found, 10, "the corpus has strings of 32 KiB or more to compare")
}

// sized returns a JSON string literal of exactly n bytes (quotes included) whose content is built
// from unit, cut short with plain letters.
func sized(n int, unit string) string {
	body := strings.Repeat(unit, (n-2)/len(unit))
	return `"` + body + strings.Repeat("a", n-2-len(body)) + `"`
}

// hostileLarge returns conversations built to trip a scan that notes strings: strings one byte
// under, at and over the threshold (quotes included), escaped ones (an escaped quote, \\, \u),
// member names that long, strings in tool arguments, images and nested deep, a payload whose
// tape is full before its large strings, and one nested deeper than the fast scan goes (the
// slower path, which notes nothing).
func hostileLarge(min int) map[string]string {
	user := func(text string) string { return `{"role":"user","content":` + text + `}` }
	call := func(args string) string {
		return `{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"f","arguments":` + args + `}]}`
	}
	image := func(data string) string {
		return `{"role":"user","content":[{"type":"image","data":` + data + `,"mimeType":"image/png"}]}`
	}
	nested := func(depth int, v string) string {
		return strings.Repeat(`{"a":[`, depth) + v + strings.Repeat(`]}`, depth)
	}
	base64ish := "QUJDRA=="
	out := map[string]string{}
	for _, d := range []int{-1, 0, 1} {
		n := min + d
		out[fmt.Sprintf("plain %+d", d)] = "[" + user(sized(n, "x")) + "]"
		out[fmt.Sprintf("escaped quote %+d", d)] = "[" + user(sized(n, `\"`)) + "]"
		out[fmt.Sprintf("escaped backslash %+d", d)] = "[" + user(sized(n, `\\`)) + "]"
		out[fmt.Sprintf("unicode escape %+d", d)] = "[" + user(sized(n, `\u00e9`)) + "]"
		out[fmt.Sprintf("utf-8 %+d", d)] = "[" + user(sized(n, "é")) + "]"
		out[fmt.Sprintf("member name %+d", d)] = "[" + call(`{`+sized(n, "k")+`:1}`) + "]"
		out[fmt.Sprintf("arguments %+d", d)] = "[" + call(`{"path":"x","content":`+sized(n, base64ish)+`}`) + "]"
		out[fmt.Sprintf("image %+d", d)] = "[" + image(sized(n, base64ish)) + "]"
		out[fmt.Sprintf("nested %+d", d)] = "[" + call(nested(50, sized(n, `ab\n`))) + "]"
	}
	many := []string{}
	for i := range 6 {
		many = append(many, user(sized(min+i, `x\"`)), call(`{`+sized(min, "k")+`:`+sized(min+1, base64ish)+`}`),
			image(sized(min, base64ish)))
	}
	out["many, side by side"] = "[" + strings.Join(many, ",") + "]"
	// Thousands of small containers fill the tape (bytesPerSpan) before the large strings come.
	out["full tape"] = "[" + call(`{"a":[`+strings.Repeat(`[],`, 20000)+`[]],"b":`+sized(min, "y")+`}`) + "," +
		user(sized(min+2, "z")) + "]"
	// Deeper than maxFastDepth: the slower path makes the canonical form and notes nothing.
	out["deeper than the fast scan"] = "[" + call(nested(maxFastDepth, sized(min, "d"))) + "," + user(sized(min, "e")) + "]"
	return out
}

func TestLargeStrings_AsScanned_Hostile(t *testing.T) {
	for _, min := range []int{32 << 10, tapedString, 300} {
		for name, payload := range hostileLarge(min) {
			t.Run(fmt.Sprintf("%s, min %d", name, min), func(t *testing.T) {
				require.True(t, json.Valid([]byte(payload)))
				requireLargeAsScanned(t, []byte(payload), Limits{}, min)
				// The same with white space after every comma (Python's json.dumps): compactValid.
				spaced := strings.ReplaceAll(payload, `},{`, "},\n {")
				requireLargeAsScanned(t, []byte(spaced), Limits{}, min)
			})
		}
	}
}

// An image naming a local file, redacted (applyImagePaths): the canonical form changes after the
// scan, so the large strings are those of what is returned, not of what was sent.
func TestLargeStrings_AsScanned_AfterRedaction(t *testing.T) {
	min := 300
	payload := `[{"role":"user","content":[{"type":"image","url":"file:///home/someone/` + strings.Repeat("p", 400) +
		`.png"},{"type":"text","text":` + sized(min, "t") + `}]},{"role":"user","content":` + sized(min+5, "u") + `}]`
	for _, policy := range []ImagePaths{ImagePathsAllow, ImagePathsRedact} {
		requireLargeAsScanned(t, []byte(payload), Limits{ImagePaths: policy}, min)
	}
	c, err := ParseLimited([]byte(payload), Limits{ImagePaths: ImagePathsRedact, LargeStrings: min})
	require.NoError(t, err)
	require.Len(t, c.LargeStrings(0, len(c.Messages), min), 2, "the path is gone, the two texts stay")
}
