package codec

import (
	"bytes"
	"encoding/json"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// oldCompactAndValid is what ParseLimited checked before validCompact, in three passes: the payload
// is its own canonical form.
func oldCompactAndValid(b []byte) bool {
	return utf8.Valid(b) && isCompact(b) && json.Valid(b)
}

// oldCanonical is canonical as it was before validCompact: the errors and their order are its.
func oldCanonical(payload []byte) ([]byte, error) {
	if !utf8.Valid(payload) {
		return nil, payloadError(ErrMalformed, int64(invalidUTF8At(payload)), "invalid UTF-8")
	}
	if len(bytes.TrimSpace(payload)) == 0 {
		return nil, payloadError(ErrMalformed, 0, "empty payload: the conversation must be a JSON array of messages")
	}
	if !isCompact(payload) || !json.Valid(payload) {
		return compact(payload)
	}
	return payload, nil
}

// nesting returns how deep the brackets of valid JSON b nest.
func nesting(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = skipString(b, i) - 1
		case '{', '[':
			depth++
			deepest = max(deepest, depth)
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// checkValidCompact: validCompact never accepts what the three passes refuse, and accepts all they
// accept unless it nests deeper than maxFastDepth.
func checkValidCompact(t *testing.T, in []byte) {
	t.Helper()
	got, want := validCompact(in), oldCompactAndValid(in)
	if got && !want {
		t.Fatalf("validCompact accepts %q, which utf8.Valid, isCompact and json.Valid refuse", in)
	}
	if want && !got && nesting(in) <= maxFastDepth {
		t.Fatalf("validCompact refuses %q, which utf8.Valid, isCompact and json.Valid accept", in)
	}
	checkTape(t, in)
	checkCompactValid(t, in)
	// And so canonical gives what it gave before: the same bytes, or the same typed error.
	canon, err := canonical(in)
	oldCanon, oldErr := oldCanonical(in)
	if !bytes.Equal(canon, oldCanon) || !reflect.DeepEqual(err, oldErr) {
		t.Fatalf("canonical(%q) = %q, %v; before validCompact: %q, %v", in, canon, err, oldCanon, oldErr)
	}
}

func TestValidCompact_SameAsTheThreePasses(t *testing.T) {
	cases := []string{
		``, ` `, `[]`, `{}`, `""`, `0`, `-0`, `-`, `01`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1E-7`, `1e+07`,
		`-01`, `--1`, `true`, `tru`, `truex`, `false`, `null`, `nul`, `[1,]`, `[,1]`, `[1 ]`, `[ 1]`,
		`{"a":1,}`, `{"a" :1}`, `{"a":}`, `{a:1}`, `{"a":1}x`, `[1][2]`, `["\u00e9"]`, `["\u00G9"]`,
		`["\ud800"]`, `["\x"]`, `["\/\b\f\n\r\t\\\""]`, "[\"\x01\"]", "[\"\x7f\"]", "[\"a\tb\"]", "[\"\xff\"]",
		"[\"\xed\xa0\x80\"]", "[\"\xef\xbf\xbd\"]", "[\"é日本🎉\"]", "[\"\xe6\x97\"]", "\xef\xbb\xbf[]",
		`["a"`, `["a`, `[`, `{`, `{"a"`, `{"a":`, `{"a":1`, `[{"a":[{"b":null}]},true,-1.5e3]`,
		`"\u`, `"\u12`, `"\`, `["a b", "c"]`, "[\"a\",\n\"b\"]", "[\"x\"]\n",
		" [ 1 , {\"a\" :\t2\r\n} ] ", "[1,\v2]", "\v[]", "[\f1]", "[1\u00a0]", "[1,\n]", "{\"a\"\n}", " ",
		strings.Repeat("[", maxFastDepth) + strings.Repeat("]", maxFastDepth),
	}
	for _, c := range cases {
		checkValidCompact(t, []byte(c))
	}
	deep := strings.Repeat("[", maxFastDepth+1) + strings.Repeat("]", maxFastDepth+1)
	require.False(t, validCompact([]byte(deep)), "deeper than maxFastDepth takes the slower path")
	_, err := Parse([]byte(deep))
	require.Error(t, err, "...which still decides (it is not an array of messages)")

	files, err := filepath.Glob("../../testdata/corpus/*.json")
	require.NoError(t, err)
	for _, f := range files {
		in, err := os.ReadFile(f)
		require.NoError(t, err)
		c, err := Parse(in)
		require.NoError(t, err)
		require.True(t, validCompact(c.Encode()), "%s, compact", f)
		checkTape(t, c.Encode())
		checkValidCompact(t, in)
	}
}

func FuzzValidCompact(f *testing.F) {
	for _, s := range []string{`[]`, `[{"role":"user","content":"a\n\u00e9"}]`, `[1,-0.5e+3,true,null]`, "[\"\xff\"]", `[ 1]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkValidCompact)
}

// oldSkipString is skipString as it was, one byte at a time: a backslash skips the byte after it.
func oldSkipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// checkSkipString: skipString finds the same end as the byte loop, from every quote of any bytes.
func checkSkipString(t *testing.T, in []byte) {
	t.Helper()
	for i, c := range in {
		if c == '"' {
			if got, want := skipString(in, i), oldSkipString(in, i); got != want {
				t.Fatalf("skipString(%q, %d) = %d, the byte loop says %d", in, i, got, want)
			}
		}
	}
}

func TestSkipString_SameAsTheByteLoop(t *testing.T) {
	for _, c := range []string{`""`, `"a"`, `"\""`, `"\\"`, `"\\\""`, `"\\\\"x"`, `"\`, `"\\`, `"a\"`, `"`,
		`"\\\\\\"`, `"x\\\"y\\"z"`, `"\u0022"`, `["a\"b","c\\",{"d":"\\\"e"}]`} {
		checkSkipString(t, []byte(c))
	}
}

func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"a\"b"`, `"\\\\"x"`, `"\`, `["a\"b","c\\"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkSkipString)
}

// checkTape: the tape of a payload the scan accepts holds every container and every string value
// (not key) of tapedString bytes or more, in order of start, each ending where skipValue says.
func checkTape(t *testing.T, in []byte) {
	t.Helper()
	tp := &tape{}
	tp.reset(cap(in), len(in))
	if !validCompactTaped(in, tp) {
		return
	}
	if want := wantTape(in, tp.limit); len(tp.spans) != len(want) || len(want) > 0 && !reflect.DeepEqual(tp.spans, want) {
		t.Fatalf("tape of %.200q:\n got %.500v\nwant %.500v", in, tp.spans, want)
	}
}

// checkCompactValid: compactValid accepts what json.Compact accepts (unless nested deeper than
// maxFastDepth, or not UTF-8, which json.Compact does not check and canonical does before it) and
// nothing else, returns what json.Compact returns, and tapes it right.
func checkCompactValid(t *testing.T, in []byte) {
	t.Helper()
	tp := &tape{}
	tp.reset(0, len(in))
	out, ok := compactValid(in, tp)
	var want bytes.Buffer
	wantOK := json.Compact(&want, in) == nil
	if ok && (!wantOK || !bytes.Equal(out, want.Bytes())) {
		t.Fatalf("compactValid(%.200q) = %.200q; json.Compact: %.200q, %v", in, out, want.Bytes(), wantOK)
	}
	if !ok && wantOK && utf8.Valid(in) && nesting(want.Bytes()) <= maxFastDepth {
		t.Fatalf("compactValid refuses %.200q, which json.Compact accepts", in)
	}
	if ok {
		if w := wantTape(out, tp.limit); len(tp.spans) != len(w) || len(w) > 0 && !reflect.DeepEqual(tp.spans, w) {
			t.Fatalf("tape of the compact form of %.200q:\n got %.500v\nwant %.500v", in, tp.spans, w)
		}
	}
}

// wantTape returns the spans the tape of valid compact JSON in must hold: the first limit of them.
func wantTape(in []byte, limit int) []span {
	var want []span
	var open []byte // the brackets of the containers we are in
	for i := 0; i < len(in); i++ {
		switch in[i] {
		case '{', '[':
			want = append(want, span{i, skipValue(in, i)})
			open = append(open, in[i])
		case '}', ']':
			open = open[:len(open)-1]
		case '"':
			end := skipString(in, i)
			isKey := len(open) > 0 && open[len(open)-1] == '{' && (in[i-1] == '{' || in[i-1] == ',')
			if end-i >= tapedString && !isKey {
				want = append(want, span{i, end})
			}
			i = end - 1
		}
	}
	return want[:min(len(want), limit)]
}

// TestTape_SkipSameAsSkipValue: from every value of the compact corpus, asked in order and in a
// shuffled order (the hint is then of no help), the tape's skip ends where skipValue does.
func TestTape_SkipSameAsSkipValue(t *testing.T) {
	files, err := filepath.Glob("../../testdata/corpus/*.json")
	require.NoError(t, err)
	for _, f := range files {
		in, err := os.ReadFile(f)
		require.NoError(t, err)
		c, err := Parse(in)
		require.NoError(t, err)
		b := c.Encode()
		tp := &tape{}
		tp.reset(cap(b), len(b))
		require.True(t, validCompactTaped(b, tp))
		starts := valueStarts(b)
		shuffled := slices.Clone(starts)
		mrand.New(mrand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for _, i := range append(starts, shuffled...) {
			if got, want := tp.skip(b, i), skipValue(b, i); got != want {
				t.Fatalf("%s: the value at %d ends at %d, the tape says %d", f, i, want, got)
			}
		}
	}
}

// valueStarts returns where every value of valid compact JSON b starts (keys are not values).
func valueStarts(b []byte) []int {
	var out []int
	var open []byte
	for i := 0; i < len(b); i++ {
		isValue := i == 0 || b[i-1] == ':' || b[i-1] == '[' || b[i-1] == ',' && open[len(open)-1] == '['
		if isValue {
			out = append(out, i)
		}
		switch b[i] {
		case '{', '[':
			open = append(open, b[i])
		case '}', ']':
			open = open[:len(open)-1]
		case '"':
			i = skipString(b, i) - 1
		}
	}
	return out
}

// TestTape_BoundedByThePayload: a payload of nothing but small containers (16 bytes of tape each
// for 3 bytes of payload, unbounded) gets a tape of at most half its size, and parses as without it.
func TestTape_BoundedByThePayload(t *testing.T) {
	in := []byte("[" + strings.Repeat(`{"role":"extension","kind":"k","data":[[],[],[],[],[],[]]},`, 20000))
	in[len(in)-1] = ']'
	tp := &tape{}
	tp.reset(cap(in), len(in))
	require.True(t, validCompactTaped(in, tp))
	require.LessOrEqual(t, len(tp.spans)*int(unsafe.Sizeof(span{})), len(in)/2)
	require.Equal(t, wantTape(in, tp.limit), tp.spans, "the first spans, then none")
	c, err := Parse(in)
	require.NoError(t, err)
	require.Equal(t, 20000, c.Stats().Extension)
	for i := 0; i < 20000; i += 997 {
		require.Equal(t, `{"role":"extension","kind":"k","data":[[],[],[],[],[],[]]}`, string(c.Messages[i]))
	}
}

// TestPlainRun_StopsAtTheFirstByteThatIsNotPlain: plainRun, reading 8 bytes at a time, stops
// exactly where the byte-by-byte loop (stringSafe) finds the first byte that is not plain, for
// each byte value at each position of a word (the borrows of one flagged byte run into the bytes
// above it, so every pair of them too), or reads on to the last 7 bytes when all are plain.
func TestPlainRun_StopsAtTheFirstByteThatIsNotPlain(t *testing.T) {
	byteLoop := func(b []byte, i int) int {
		for i < len(b) && stringSafe[b[i]] {
			i++
		}
		return i
	}
	check := func(b []byte) {
		t.Helper()
		got, want := plainRun(b, 0), byteLoop(b, 0)
		if got != want && !(got >= len(b)-7 && want >= got) { // the tail is left to the byte loop
			t.Fatalf("plainRun(%q) = %d, the byte loop stops at %d", b, got, want)
		}
	}
	for pos := range 8 {
		for c := range 256 {
			w := []byte("abcdefghijklmnopqrstuvwx")
			w[8+pos] = byte(c)
			check(w)
			for c2 := range 256 { // a second byte above it: a borrow from the first must not hide it
				if pos < 7 {
					w[9+pos] = byte(c2)
					check(w)
				}
			}
		}
	}
	check([]byte("0123456789abcdefghijklmnopqrstuv")) // all plain: up to the tail
}

// TestPutTape_KeepsNoSliceOfThePayload: a tape goes back to the pool with its member buffer
// (checker.scratch) emptied to the last slot: the members are slices of the payload parsed, which
// the pool must not keep alive.
func TestPutTape_KeepsNoSliceOfThePayload(t *testing.T) {
	tp := new(tape)
	payload := []byte(`{"role":"user","content":"hi"}`)
	m := tp.scratch()
	*m = appendMembers(*m, payload, nil)
	*m = (*m)[:0] // as checker.next leaves it between messages
	putTape(tp)
	for i, mb := range tp.members[:cap(tp.members)] {
		require.Nil(t, mb.key, "member %d's key", i)
		require.Nil(t, mb.value, "member %d's value", i)
	}
}

// oldScanString is scanString as it was before plainRun (s22-gcpu): one byte at a time.
func oldScanString(b []byte, i int) int {
	for i++; i < len(b); {
		for i < len(b) && stringSafe[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 < len(b) && shortEscape[b[i+1]] {
				i += 2
			} else if i = scanEscape(b, i); i < 0 {
				return -1
			}
		case c < 0x20:
			return -1
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return -1
			}
			i += n
		}
	}
	return -1
}

// checkScanString: scanString, reading plain text 8 bytes at a time, ends (or refuses) every
// string of in exactly where the byte-at-a-time scan did, from every quote of in; and it reads
// nothing past len(in) (in is cut to its length, so a read past it would panic, not read on).
func checkScanString(t *testing.T, in []byte) {
	t.Helper()
	in = in[:len(in):len(in)]
	for i, c := range in {
		if c == '"' {
			if got, want := scanString(in, i), oldScanString(in, i); got != want {
				t.Fatalf("scanString(%q, %d) = %d, the byte-at-a-time scan says %d", in, i, got, want)
			}
		}
	}
}

// TestScanString_SameAsTheByteLoop: every byte value in every lane of the two words after a
// quote, with a quote or a backslash, a control byte or a byte of a multi-byte rune before or
// after it, and strings ending on, before and after a word boundary, end where they did.
func TestScanString_SameAsTheByteLoop(t *testing.T) {
	for _, c := range []string{`""`, `"a"`, `"abcdefg"`, `"abcdefgh"`, `"abcdefghi"`, `"abcdefghijklmno"`,
		`"abcdefghijklmnop"`, `"abcdefg\"`, `"abcdefg\\"`, `"abcdefgh\"x"`, "\"abcdefg\x1f\"", "\"abcdefg\x7f\"",
		"\"abcdefg\xc3\xa9\"", "\"abcdefg\xc3\"", "\"abcdefg\xe6\x97\xa5\"", "\"abcdef\xe6\x97\xa5x\"",
		"\"abcdefg\xed\xa0\x80\"", "\"abcdefg\xff\"", `"abcdefg\u00e9"`, `"abcdefg\u00"`, `"abcdefgh`} {
		checkScanString(t, []byte(c))
	}
	for pos := range 16 {
		for c := range 256 {
			b := []byte(`"abcdefghijklmnopqrstuvwxyz"`)
			b[1+pos] = byte(c)
			checkScanString(t, b)
			checkScanString(t, b[:2+pos]) // the string cut right after it
			b[2+pos] = '"'
			checkScanString(t, b) // and closed right after it
		}
	}
}

func FuzzScanString(f *testing.F) {
	for _, s := range []string{`"abcdefgh"`, `"abcdefg\"x"`, "\"abcdefg\xc3\xa9\"", "\"abcdefgh\x01\"", `["a\"b","c\\"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkScanString)
}
