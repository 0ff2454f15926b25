package oldcodec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/stretchr/testify/require"
)

// The differential tests hold the validator to what it was before its rewrite (oldcodec, a frozen
// copy): every payload accepted or refused alike, with the same canonical bytes and counts, or the
// same typed error (sentinel, text, message index, field, offset).

// sentinels pairs each sentinel with the old one it replaces.
var sentinels = []struct{ new, old error }{
	{codec.ErrLocalPath, ErrLocalPath}, // before ErrMalformed: it wraps it
	{codec.ErrMalformed, ErrMalformed},
	{codec.ErrUnknownRole, ErrUnknownRole},
	{codec.ErrUnknownContentType, ErrUnknownContentType},
	{codec.ErrUnknownFormatVersion, ErrUnknownFormatVersion},
	{codec.ErrTooLarge, ErrTooLarge},
	{codec.ErrUnknownDialect, ErrUnknownDialect},
}

// describeOutcome renders one Parse outcome so that two can be compared as strings.
func describeOutcome(c *codec.Conversation, err error) string {
	if err != nil {
		var ve *codec.ValidationError
		if !errors.As(err, &ve) {
			return fmt.Sprintf("untyped error %T: %v", err, err)
		}
		for i, s := range sentinels {
			if errors.Is(err, s.new) {
				return fmt.Sprintf("refused: sentinel %d, index %d, field %q, offset %d, detail %q: %s", i, ve.Index, ve.Field, ve.Offset, ve.Detail, err)
			}
		}
		return "refused with no sentinel: " + err.Error()
	}
	return fmt.Sprintf("accepted: %+v, %d messages, %q", c.Stats(), len(c.Messages), c.Encode())
}

func describeOldOutcome(c *Conversation, err error) string {
	if err != nil {
		var ve *ValidationError
		if !errors.As(err, &ve) {
			return fmt.Sprintf("untyped error %T: %v", err, err)
		}
		for i, s := range sentinels {
			if errors.Is(err, s.old) {
				return fmt.Sprintf("refused: sentinel %d, index %d, field %q, offset %d, detail %q: %s", i, ve.Index, ve.Field, ve.Offset, ve.Detail, err)
			}
		}
		return "refused with no sentinel: " + err.Error()
	}
	st := c.Stats()
	return fmt.Sprintf("accepted: %+v, %d messages, %q", codec.Stats(st), len(c.Messages), c.Encode())
}

// oldTries bounds how often the oracle is asked again when it disagrees: where a payload has two
// errors of equal rank inside one object (two local paths in one image part, two bad usage
// counts), the old code named the one Go's map iteration happened to reach first. The new code
// names the first in the message; the old one must be able to say the same.
const oldTries = 64

// checkSameAsOld fails when codec.ParseLimited and the old validator disagree on in with lim, and
// likewise codec.Classify and the old Classify on each message of in.
func checkSameAsOld(t *testing.T, in []byte, lim codec.Limits) {
	t.Helper()
	c, err := codec.ParseLimited(in, lim)
	got := describeOutcome(c, err)
	oldLim := Limits{MaxBytes: lim.MaxBytes, ImagePaths: ImagePaths(lim.ImagePaths), Dialect: lim.Dialect, Continues: lim.Continues}
	var want string
	for range oldTries {
		if want = describeOldOutcome(ParseLimited(in, oldLim)); want == got {
			break
		}
	}
	if got != want {
		t.Fatalf("ParseLimited(%.300q, %+v):\n new: %.2000s\n old: %.2000s", in, lim, got, want)
	}
	if err != nil || lim.ImagePaths != codec.ImagePathsAllow || lim.Continues {
		return // Classify depends on the dialect only: once per dialect is enough
	}
	for i, m := range c.Messages {
		if got, want := codec.Classify(lim.Dialect, m), codec.Class(Classify(lim.Dialect, m)); got != want {
			t.Fatalf("Classify(%q, message %d %.300q) = %d, before %d", lim.Dialect, i, m, got, want)
		}
	}
}

// differentialLimits are the limits each payload is checked under: every dialect, as a first save
// and as an append, with each image path policy.
func differentialLimits() []codec.Limits {
	var out []codec.Limits
	for _, d := range append(codec.Dialects(), "", "no-such-dialect") {
		for _, policy := range []codec.ImagePaths{codec.ImagePathsAllow, codec.ImagePathsRefuse, codec.ImagePathsRedact} {
			for _, cont := range []bool{false, true} {
				out = append(out, codec.Limits{Dialect: d, ImagePaths: policy, Continues: cont})
			}
		}
	}
	return out
}

// differentialSeeds are the corpus, the dialect fixtures, and the payloads of the codec's tests.
func differentialSeeds(t testing.TB) [][]byte {
	var out [][]byte
	for _, glob := range []string{"../../../../testdata/corpus/*.json", "../../../../testdata/dialects/*.json"} {
		files, err := filepath.Glob(glob)
		require.NoError(t, err)
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			out = append(out, b)
		}
	}
	for _, s := range differentialPayloads {
		out = append(out, []byte(s))
	}
	return out
}

// differentialPayloads are small payloads reaching the corners of every dialect.
var differentialPayloads = []string{
	``, ` `, `{}`, `[]`, `[1]`, `[null]`, `[{}]`, "\xff", `[{"role":"user","content":"\xff"}]`,
	`[{"role":"user","content":"a"}]`, `[{"role":"user","role":"assistant","content":"a"}]`,
	`[{"\u0072ole":"user","content":"a"}]`, `[{"role":"us\u0065r","content":"a"}]`,
	`[{"role":"assistant","content":[{"type":"toolCall","id":"i","name":"n","arguments":{}}],"usage":{"input":1,"output":-1,"cacheRead":-2}}]`,
	`[{"role":"toolResult","toolCallId":"t","content":[{"type":"image","url":"/a/b.png","data":"file:///x.png","mimeType":"/x"}]}]`,
	`[{"role":"user","content":[{"type":"image","url":"C:\\x.png","path":"~/y.jpg"}]}]`,
	`[{"role":"extension","kind":"compaction","data":[1e999,12345678901234567890123]}]`,
	`[{"role":"system","content":"s"},{"role":"user","content":[{"type":"image_url","image_url":{"url":"file:///tmp/a.png"}}]}]`,
	`[{"role":"assistant","content":null,"tool_calls":[{"type":"function","id":"c","function":{"name":"f","arguments":"{}"}}],"function_call":{"name":"f","arguments":""}}]`,
	`[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"/etc/x.png"}},{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"url","url":"file:x"}}]}]}]`,
	`[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]`,
	`[{"step_index":0,"type":"UserInput","source":"USER","usage_metadata":{"a":-1,"b":-2}},{"step_index":1,"type":"Compaction"}]`,
	`[{"type":"compaction","encrypted_content":"x"},{"id":"r"},{"type":"input_image"},{"role":"user","content":[{"type":"input_image","image_url":"/x.png"},{"type":"input_file","file_url":"file:/y"}]}]`,
	`[{"role":"user","content":[{"image":{"path":"/a.png","url":"/b.png"}}]}]`,
	`[{"role":"user","content":[{"text":"hi"},{"toolUse":{"toolUseId":"t","name":"n","input":{}}}]}]`,
	`[{"role":"assistant","content":[{"type":"text","text":"a","Type":"x"}],"Role":"x"}]`,
}

// mutations returns variants of in: bytes dropped, doubled or replaced by ones JSON cares about,
// at n places spread over in.
func mutations(in []byte, n int) [][]byte {
	var out [][]byte
	if len(in) == 0 {
		return nil
	}
	step := max(len(in)/n, 1)
	for i := 0; i < len(in); i += step {
		out = append(out, append(append([]byte{}, in[:i]...), in[i+1:]...))
		out = append(out, append(append(append([]byte{}, in[:i+1]...), in[i]), in[i+1:]...))
		for _, r := range []byte{'"', '\\', '{', '}', '[', ']', ',', ':', '0', '-', 'n', ' ', 0x01, 0xff} {
			m := append([]byte{}, in...)
			m[i] = r
			out = append(out, m)
		}
	}
	return out
}

// TestParse_SameAsOldValidator: on the corpus, the dialect fixtures, the payloads above and
// mutations of them, the validator accepts and refuses what it did before, with the same errors.
func TestParse_SameAsOldValidator(t *testing.T) {
	lims := differentialLimits()
	for _, in := range differentialSeeds(t) {
		large := len(in) > 64<<10
		for _, lim := range lims {
			// The large files are native: in other dialects, once each is enough (refused at once).
			if !large || lim.Dialect == "" || lim.ImagePaths == codec.ImagePathsAllow && !lim.Continues {
				checkSameAsOld(t, in, lim)
			}
		}
		if large {
			continue // their mutations add nothing those of the small ones do not reach
		}
		// Each mutation under one of the limits in turn: all of them would take a minute.
		for k, m := range mutations(in, 40) {
			checkSameAsOld(t, m, lims[k%len(lims)])
		}
	}
	// The limit on size names the same figures.
	checkSameAsOld(t, []byte(`[{"role":"user","content":"a"}]`), codec.Limits{MaxBytes: 10})
}

// FuzzParse_SameAsOldValidator: the same on fuzzed payloads, under limits chosen by the fuzzer.
func FuzzParse_SameAsOldValidator(f *testing.F) {
	for _, s := range differentialSeeds(f) {
		if len(s) <= 64<<10 {
			f.Add(s, uint8(0))
		}
	}
	lims := differentialLimits()
	f.Fuzz(func(t *testing.T, in []byte, which uint8) {
		checkSameAsOld(t, in, lims[int(which)%len(lims)])
		if !strings.Contains(string(in), "\n") {
			return
		}
		// And the compact form, which takes the one-pass path.
		var c bytes.Buffer
		if err := compactInto(&c, in); err == nil {
			checkSameAsOld(t, c.Bytes(), lims[int(which)%len(lims)])
		}
	})
}

func compactInto(buf *bytes.Buffer, in []byte) error { return json.Compact(buf, in) }
