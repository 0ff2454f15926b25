package codec

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func decodeValue(t testing.TB, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v))
	return v
}

func TestParse_CorpusRoundTrip(t *testing.T) {
	files, err := filepath.Glob("../../testdata/corpus/*.json")
	require.NoError(t, err)
	require.Len(t, files, 8)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in, err := os.ReadFile(f)
			require.NoError(t, err)
			c, err := Parse(in)
			require.NoError(t, err)
			var arr []json.RawMessage
			require.NoError(t, json.Unmarshal(in, &arr))
			require.Len(t, c.Messages, len(arr))
			require.Equal(t, len(arr), c.Stats().Messages)
			out := c.Encode()
			require.Equal(t, c.Size(), len(out))
			var compact bytes.Buffer
			require.NoError(t, json.Compact(&compact, in))
			require.True(t, bytes.Equal(compact.Bytes(), out), "canonical form is the compacted input")
			require.Equal(t, decodeValue(t, in), decodeValue(t, out))
		})
	}
}

func TestParse_KeepsEveryDigitEscapeAndUnknownField(t *testing.T) {
	img := make([]byte, 2<<20)
	_, _ = rand.Read(img)
	in := fmt.Sprintf(`[ {"zeta":1,"role":"user","alpha":{"x":[1e400,-0.0000000000000000001]},
	  "content":[{"type":"text","text":"😀 \u0000 \ud83d\ude00 שלום e\u0301","x-part":true}],"timestamp":12345678901234567890123456789},
	 {"role":"assistant","content":[{"type":"toolCall","id":"a","name":"b","arguments":{"n":9007199254740993}}],
	  "usage":{"input":1,"cache_read":2,"total_tokens":3,"cost":{"total":0.017400000000000002},"future":"x"},"stopReason":"toolUse"},
	 {"role":"toolResult","toolCallId":"a","content":[{"type":"text","text":%q},{"type":"image","data":%q,"mimeType":"image/png"}]},
	 {"role":"extension","kind":"compaction","data":null} ]`,
		strings.Repeat("multi-MiB tool output ✓\n", 200_000), base64.StdEncoding.EncodeToString(img))
	c, err := Parse([]byte(in))
	require.NoError(t, err)
	out := string(c.Encode())
	for _, want := range []string{
		`{"zeta":1,"role":"user","alpha":{"x":[1e400,-0.0000000000000000001]}`, // key order and digits
		`12345678901234567890123456789`, `9007199254740993`, `0.017400000000000002`,
		`\u0000 \ud83d\ude00 שלום e\u0301`, `"x-part":true`, `"future":"x"`,
	} {
		require.Contains(t, out, want)
	}
	require.Equal(t, decodeValue(t, []byte(in)), decodeValue(t, []byte(out)))
	require.Equal(t, Stats{Messages: 4, User: 1, Assistant: 1, ToolResult: 1, Extension: 1, ToolCalls: 1}, c.Stats())
}

func TestParse_RefusesBadInputNamingWhere(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		want   error
		index  int
		field  string
		detail string
	}{
		{"empty payload", ``, ErrMalformed, -1, "", "empty"},
		{"truncated JSON", `[{"role":"user","content":"a"`, ErrMalformed, -1, "", "unexpected end"},
		{"not an array", `{"role":"user"}`, ErrMalformed, -1, "", "JSON array"},
		{"array of non-objects", `[1]`, ErrMalformed, 0, "", "want an object"},
		{"missing role", `[{"content":"a"}]`, ErrMalformed, 0, "role", "missing"},
		{"capitalised role key", `[{"Role":"user","content":"a"}]`, ErrMalformed, 0, "role", "missing"},
		{"role not a string", `[{"role":7}]`, ErrMalformed, 0, "role", "want a string"},
		{"unknown role", `[{"role":"user","content":"a"},{"role":"system2"}]`, ErrUnknownRole, 1, "role", `"system2"`},
		{"unknown content type", `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"video"}]}]`, ErrUnknownContentType, 0, "content[1].type", `"video"`},
		{"missing text", `[{"role":"user","content":[{"type":"text"}]}]`, ErrMalformed, 0, "content[0].text", "missing"},
		{"user content a number", `[{"role":"user","content":3}]`, ErrMalformed, 0, "content", "want a string or an array"},
		{"assistant content a string", `[{"role":"assistant","content":"a"}]`, ErrMalformed, 0, "content", "want an array"},
		{"assistant without content", `[{"role":"assistant"}]`, ErrMalformed, 0, "content", "missing"},
		{"toolCall without id", `[{"role":"assistant","content":[{"type":"toolCall","name":"x","arguments":{}}]}]`, ErrMalformed, 0, "content[0].id", "missing"},
		{"toolCall arguments a string", `[{"role":"assistant","content":[{"type":"toolCall","id":"i","name":"x","arguments":"{}"}]}]`, ErrMalformed, 0, "content[0].arguments", "want an object"},
		{"image without data or url", `[{"role":"user","content":[{"type":"image","mimeType":"image/png"}]}]`, ErrMalformed, 0, "content[0]", "data"},
		{"toolResult without toolCallId", `[{"role":"toolResult","content":[]}]`, ErrMalformed, 0, "toolCallId", "missing"},
		{"toolResult isError a string", `[{"role":"toolResult","toolCallId":"t","isError":"no","content":[]}]`, ErrMalformed, 0, "isError", "want a boolean"},
		{"extension without kind", `[{"role":"extension","data":{}}]`, ErrMalformed, 0, "kind", "missing"},
		{"extension with empty kind", `[{"role":"extension","kind":""}]`, ErrMalformed, 0, "kind", "empty"},
		{"usage input a string", `[{"role":"assistant","content":[],"usage":{"input":"12"}}]`, ErrMalformed, 0, "usage.input", `"12"`},
		{"usage input negative", `[{"role":"assistant","content":[],"usage":{"totalTokens":-1}}]`, ErrMalformed, 0, "usage.totalTokens", "non-negative"},
		{"model a number", `[{"role":"assistant","content":[],"model":4}]`, ErrMalformed, 0, "model", "want a string"},
		{"timestamp a word", `[{"role":"user","content":"a","timestamp":"yesterday"}]`, ErrMalformed, 0, "timestamp", "want a number"},
		{"invalid UTF-8", "[{\"role\":\"user\",\"content\":\"\xff\"}]", ErrMalformed, -1, "", "UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			require.ErrorIs(t, err, tc.want)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tc.index, ve.Index)
			require.Equal(t, tc.field, ve.Field)
			require.Contains(t, err.Error(), tc.detail)
			if tc.index >= 0 {
				require.Contains(t, err.Error(), fmt.Sprintf("message %d", tc.index))
			}
		})
	}
	t.Run("byte offset of a syntax error", func(t *testing.T) {
		_, err := Parse([]byte(`[{"role":"user","content":"a"},{"role":]`))
		var ve *ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, int64(40), ve.Offset)
		require.Contains(t, err.Error(), "byte 40")
	})
	t.Run("oversize", func(t *testing.T) {
		_, err := ParseLimited([]byte(`[{"role":"user","content":"abcdef"}]`), Limits{MaxBytes: 10})
		require.ErrorIs(t, err, ErrTooLarge)
	})
	t.Run("empty array is a conversation", func(t *testing.T) {
		c, err := Parse([]byte(" [ ] "))
		require.NoError(t, err)
		require.Equal(t, "[]", string(c.Encode()))
	})
}

func TestBlob_RoundTripAndRefusals(t *testing.T) {
	raw := bytes.Repeat([]byte(`{"role":"user","content":"hello"},`), 1000)
	blob := EncodeBlob(raw)
	require.Equal(t, "CPKT", string(blob[:4]))
	require.Less(t, len(blob), len(raw)/10)
	got, err := DecodeBlob(blob, int64(len(raw)))
	require.NoError(t, err)
	require.Equal(t, raw, got)

	_, err = DecodeBlob(blob, int64(len(raw)-1))
	require.ErrorIs(t, err, ErrTooLarge, "a blob may not decompress past the size its reference records")

	future := bytes.Clone(blob)
	future[4] = 9
	_, err = DecodeBlob(future, 1<<20)
	require.ErrorIs(t, err, ErrUnknownFormatVersion)
	require.Contains(t, err.Error(), "version 9")

	badMagic := bytes.Clone(blob)
	badMagic[0] = 'X'
	_, err = DecodeBlob(badMagic, 1<<20)
	require.ErrorIs(t, err, ErrMalformed)

	_, err = DecodeBlob(blob[:len(blob)-5], 1<<20)
	require.ErrorIs(t, err, ErrMalformed, "truncated zstd")

	require.NoError(t, CheckFormatVersion(1))
	require.ErrorIs(t, CheckFormatVersion(2), ErrUnknownFormatVersion)
}

func TestDecompressZstd_RefusesBombs(t *testing.T) {
	bomb := CompressZstd(make([]byte, 64<<20))
	require.Less(t, len(bomb), 64<<10)
	_, err := DecompressZstd(bomb, 1<<20)
	require.ErrorIs(t, err, ErrTooLarge)

	// Concatenated frames decode to the concatenation, and the bound covers them all.
	two := append(CompressZstd([]byte("[1,")), CompressZstd([]byte("2]"))...)
	got, err := DecompressZstd(two, 5)
	require.NoError(t, err)
	require.Equal(t, "[1,2]", string(got))
	_, err = DecompressZstd(two, 4)
	require.ErrorIs(t, err, ErrTooLarge)

	_, err = DecompressZstd([]byte("not zstd at all"), 1<<20)
	require.ErrorIs(t, err, ErrMalformed)
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`[]`, `[{"role":"user","content":"a"}]`,
		`[{"role":"assistant","content":[{"type":"toolCall","id":"i","name":"n","arguments":{}}],"usage":{"input":1}}]`,
		`[{"role":"toolResult","toolCallId":"t","content":[{"type":"image","url":"u"}]}]`,
		`[{"role":"extension","kind":"k","data":[1e999]}]`, `[{"role":"user","content":"\ud800"}]`,
		// Strings and a member name of 64 bytes or more, the least the scan notes (LargeStrings).
		`[{"role":"user","content":"` + strings.Repeat(`ab\"`, 16) + `"},{"role":"extension","kind":"k","data":{"` +
			strings.Repeat("k", 70) + `":"` + strings.Repeat("v", 62) + `"}}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := Parse(in)
		if err != nil {
			return
		}
		again, err := Parse(c.Encode())
		if err != nil {
			t.Fatalf("canonical form does not re-parse: %v", err)
		}
		if !bytes.Equal(again.Encode(), c.Encode()) {
			t.Fatalf("canonical form is not stable")
		}
		// Differential: the walker must split and read exactly what encoding/json does.
		var compact bytes.Buffer
		if json.Compact(&compact, in) != nil || !bytes.Equal(compact.Bytes(), c.Encode()) {
			t.Fatalf("canonical form differs from json.Compact")
		}
		var msgs []map[string]json.RawMessage
		if err := json.Unmarshal(in, &msgs); err != nil || len(msgs) != len(c.Messages) {
			t.Fatalf("message count: encoding/json %d (%v), walker %d", len(msgs), err, len(c.Messages))
		}
		for i, m := range c.Messages {
			got := members(m)
			if len(got) != len(msgs[i]) {
				t.Fatalf("message %d: walker found %d members, encoding/json %d", i, len(got), len(msgs[i]))
			}
		}
		// The large strings the scan notes are those a second pass finds, in every span.
		noted, err := ParseLimited(in, Limits{LargeStrings: tapedString})
		if err != nil {
			t.Fatalf("parsed without LargeStrings, refused with it: %v", err)
		}
		n := len(noted.Messages)
		for _, r := range [][2]int{{0, n}, {n / 2, n}, {0, n / 2}} {
			want, got := LargeStrings(noted.Span(r[0], r[1]), tapedString), noted.LargeStrings(r[0], r[1], tapedString)
			if fmt.Sprint(want) != fmt.Sprint(got) {
				t.Fatalf("messages %d..%d: large strings noted %v, found again %v", r[0], r[1], got, want)
			}
		}
	})
}

func BenchmarkParse(b *testing.B) {
	in, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	require.NoError(b, err)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeBlob(b *testing.B) {
	in, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	require.NoError(b, err)
	c, err := Parse(in)
	require.NoError(b, err)
	raw := c.Encode()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		_ = EncodeBlob(raw)
	}
}

func TestAnnotate(t *testing.T) {
	cases := []struct{ in, plain, prefixed string }{
		{`{"role":"user","content":"hi <b>","timestamp":1}`,
			`{"role":"user","content":"hi <b>","timestamp":1,"agentId":"planner"}`,
			`{"role":"user","content":"[planner] hi <b>","timestamp":1,"agentId":"planner"}`},
		{`{"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"text","text":"a\nb","x":1},{"type":"text","text":"c"}],"z":[1e400]}`,
			`{"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"text","text":"a\nb","x":1},{"type":"text","text":"c"}],"z":[1e400],"agentId":"planner"}`,
			`{"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"text","text":"[planner] a\nb","x":1},{"type":"text","text":"c"}],"z":[1e400],"agentId":"planner"}`},
		{`{"role":"extension","kind":"k","data":{"content":"not a message's content"}}`,
			`{"role":"extension","kind":"k","data":{"content":"not a message's content"},"agentId":"planner"}`,
			`{"role":"extension","kind":"k","data":{"content":"not a message's content"},"agentId":"planner"}`},
	}
	for _, c := range cases {
		require.Equal(t, c.plain, string(Annotate([]byte(c.in), "planner", false)))
		require.Equal(t, c.prefixed, string(Annotate([]byte(c.in), "planner", true)))
		_, err := Parse([]byte("[" + string(Annotate([]byte(c.in), "a\"b", true)) + "]"))
		require.NoError(t, err, "an annotated message is still a valid message")
	}
}

func TestStreamedBlobs(t *testing.T) {
	raw := bytes.Repeat([]byte(`{"role":"user","content":"ünïcode and 123456789012345678901234567890"},`), 100_000)
	var blob bytes.Buffer
	w, err := NewBlobWriter(&blob)
	require.NoError(t, err)
	for i := 0; i < len(raw); i += 1 << 16 {
		_, err := w.Write(raw[i:min(i+1<<16, len(raw))])
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	require.Less(t, blob.Len(), len(raw)/10)

	whole, err := DecodeBlob(blob.Bytes(), int64(len(raw)))
	require.NoError(t, err)
	require.True(t, bytes.Equal(raw, whole), "a streamed blob is a blob")

	dst := append(make([]byte, 0, len(raw)+2), '[')
	got, err := AppendBlob(dst, bytes.NewReader(blob.Bytes()), int64(len(raw)))
	require.NoError(t, err)
	require.True(t, bytes.Equal(raw, got[1:]))
	require.Same(t, &dst[:1][0], &got[:1][0], "decoded in place: no second buffer")

	_, err = AppendBlob(nil, bytes.NewReader(blob.Bytes()), int64(len(raw))-1)
	require.ErrorIs(t, err, ErrTooLarge, "never more than the reference says")
	_, err = AppendBlob(nil, bytes.NewReader(blob.Bytes()[:blob.Len()/2]), int64(len(raw)))
	require.ErrorIs(t, err, ErrMalformed, "a truncated blob")
	_, err = AppendBlob(nil, bytes.NewReader([]byte("CPKT\x09\x01\x00\x00")), 10)
	require.ErrorIs(t, err, ErrUnknownFormatVersion)

	z := CompressZstd(raw)
	got, err = DecompressZstdFrom(bytes.NewReader(z), FrameContentSize(z), int64(len(raw)))
	require.NoError(t, err)
	require.True(t, bytes.Equal(raw, got))
	_, err = DecompressZstdFrom(bytes.NewReader(z), -1, 1000)
	require.ErrorIs(t, err, ErrTooLarge, "a bomb costs at most the limit")
}

func TestLargeStrings_FindsWholeStringsOnly(t *testing.T) {
	big := strings.Repeat(`ab\"c\\`, 10) // escaped quotes and a backslash before a quote
	key := strings.Repeat("k", 40)       // a long object key counts too
	short := `x\"y`                      // below the limit
	raw := []byte(`{"role":"user","content":"` + big + `","n":[1,"` + short + `",{"` + key + `":true}]},{"s":"` + big + `"}`)
	spans := LargeStrings(raw, 30)
	require.Len(t, spans, 3)
	var got []string
	for _, s := range spans {
		var v string
		require.NoError(t, json.Unmarshal(raw[s[0]:s[1]], &v), "a span is one whole JSON string")
		got = append(got, v)
	}
	unescaped := strings.Repeat(`ab"c\`, 10)
	require.Equal(t, []string{unescaped, key, unescaped}, got)
	require.Empty(t, LargeStrings(raw, 1<<20))
	require.Len(t, LargeStrings(raw, 2), 9, "every string, keys included")
}

// Inline images are base64: no repeats for zstd to find, but six bits of entropy per byte. The
// encoder must entropy-code such blocks (the default level alone stores them raw).
func TestBlob_Base64ImagesCompress(t *testing.T) {
	img := make([]byte, 300<<10)
	_, _ = rand.Read(img)
	b64 := []byte(base64.StdEncoding.EncodeToString(img))
	require.Less(t, len(EncodeBlob(b64)), len(b64)*78/100)
	require.Less(t, len(CompressZstd(b64)), len(b64)*78/100)
	var streamed bytes.Buffer
	w, err := NewBlobWriter(&streamed)
	require.NoError(t, err)
	_, err = w.Write(b64)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.Less(t, streamed.Len(), len(b64)*78/100)
	back, err := DecodeBlob(streamed.Bytes(), int64(len(b64)))
	require.NoError(t, err)
	require.Equal(t, b64, back)
}

// BenchmarkParseLimited measures the validation of a save on the real corpus: the whole conversation
// compact (what JSON.stringify and json.Marshal send), and a 2-message append of about 4.7 KB
// (the typical save of docs/format.md §8.15a), also compact.
func BenchmarkParseLimited(b *testing.B) {
	in, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	require.NoError(b, err)
	whole, err := Parse(in)
	require.NoError(b, err)
	app := appendOfAbout(b, whole, 4700)
	for _, bc := range []struct {
		name    string
		payload []byte
		lim     Limits
	}{
		{"whole", whole.Encode(), Limits{MaxBytes: 64 << 20}},
		{"append2", app, Limits{MaxBytes: 64 << 20, Continues: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.payload)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseLimited(bc.payload, bc.lim); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// appendOfAbout returns the first two consecutive messages of c (after the first) whose array is
// within 10% of size bytes.
func appendOfAbout(b *testing.B, c *Conversation, size int) []byte {
	for i := 1; i+2 <= len(c.Messages); i++ {
		if n := len(c.Span(i, i+2)) + 2; n > size*9/10 && n < size*11/10 {
			return append(append([]byte{'['}, c.Span(i, i+2)...), ']')
		}
	}
	b.Fatalf("no 2-message append of about %d bytes", size)
	return nil
}
