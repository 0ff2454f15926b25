package conv

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/internal/codec"
)

var update = flag.Bool("update", false, "rewrite the golden files of the provider views")

// golden compares got with testdata/name (indented for review), or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, got, "", "  "); err != nil {
		t.Fatal(err)
	}
	pretty.WriteByte('\n')
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pretty.Bytes(), want) {
		t.Fatalf("%s differs (go test -update to rewrite, then review):\n%s", name, pretty.Bytes())
	}
}

func convert(t *testing.T, from, to string, in []byte) []byte {
	t.Helper()
	c, err := Decode(from, in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Encode(to)
	if err != nil {
		t.Fatalf("%s to %s: %v", from, to, err)
	}
	return out
}

// native -> openai-chat carries everything: the golden view, and back to native gives the input
// byte for byte (big integer, astral text, usage, timestamps, toolName and isError included).
func TestViewNativeToOpenAIChat(t *testing.T) {
	in, err := os.ReadFile("testdata/native.json")
	if err != nil {
		t.Fatal(err)
	}
	view := convert(t, "native", "openai-chat", in)
	golden(t, "pairs/native-weather.as-openai-chat.json", view)
	back := convert(t, "openai-chat", "native", view)
	if want := canonical(t, in); !bytes.Equal(back, want) {
		t.Fatalf("back to native differs at byte %d:\n got %s\nwant %s", firstDiff(back, want), back, want)
	}
}

// openai-chat -> native: the golden conversion of the openai-chat fixture, and back to openai-chat
// it reads as the same typed conversation.
func TestViewOpenAIChatToNative(t *testing.T) {
	in, err := os.ReadFile("../../testdata/dialects/openai-chat.json")
	if err != nil {
		t.Fatal(err)
	}
	native := convert(t, "openai-chat", "native", in)
	golden(t, "pairs/openai-chat.as-native.json", native)
	// And back: the same conversation, typed (the bytes differ only where openai-chat allows two
	// spellings: an assistant's "content": null is written as no text, [] here).
	again := convert(t, "openai-chat", "native", convert(t, "native", "openai-chat", native))
	if !bytes.Equal(again, native) {
		t.Fatalf("openai-chat -> native -> openai-chat -> native changed it:\n got %s\nwant %s", again, native)
	}
}

// What openai-chat has no place for is refused, naming the message and the part; nothing is
// written half-converted.
func TestViewOpenAIChatRefuses(t *testing.T) {
	cases := []struct{ in, what string }{
		{`[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"hmm"}]}]`, "content[0]: a thinking part"},
		{`[{"role":"extension","kind":"session_header","data":{}}]`, `kind "session_header"`},
		{`[{"role":"toolResult","toolCallId":"c","content":[{"type":"image","url":"https://x/y.png"}]}]`, "content[0]: a image part"},
	}
	for _, tc := range cases {
		c, err := Decode("native", []byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Encode("openai-chat")
		var ce *CarryError
		if !errors.As(err, &ce) || !errors.Is(err, ErrNoConversion) || !strings.Contains(ce.What, tc.what) {
			t.Errorf("%s: want a CarryError naming %q, got %v", tc.in, tc.what, err)
		}
	}
}

// viewInputs are the conversations every provider view is tried on: each dialect's fixture
// (testdata/dialects) and two conversations written for the views (testdata here), by name.
func viewInputs(t *testing.T) map[string]struct{ dialect, file string } {
	inputs := map[string]struct{ dialect, file string }{
		"native-weather":   {"native", "testdata/native.json"},
		"anthropic-coding": {"anthropic", "testdata/anthropic.json"},
	}
	files, _ := filepath.Glob("../../testdata/dialects/*.json")
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		dialect := name
		if name == "native-serde" {
			dialect = "native"
		}
		inputs[name] = struct{ dialect, file string }{dialect, f}
	}
	if len(inputs) < 9 {
		t.Fatalf("only %d inputs", len(inputs))
	}
	return inputs
}

// Every provider view of every input, into every dialect: either the conversion carries it all (a
// golden file of the view, testdata/pairs/INPUT.as-DIALECT.json, which reads back to the same
// native conversation as the input: nothing lost on the way) or it refuses with a CarryError naming
// what it cannot carry (a golden file of the refusal, INPUT.as-DIALECT.refused.txt). Never a
// silent drop.
func TestViewPairs(t *testing.T) {
	for name, in := range viewInputs(t) {
		raw, err := os.ReadFile(in.file)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Decode(in.dialect, raw)
		if err != nil {
			t.Fatal(err)
		}
		wantNative, nativeErr := c.Encode("native")
		for _, to := range codec.Dialects() {
			if to == in.dialect {
				continue
			}
			t.Run(name+"-as-"+to, func(t *testing.T) {
				base := filepath.Join("pairs", name+".as-"+to)
				view, err := c.Encode(to)
				if err != nil {
					var ce *CarryError
					if !errors.As(err, &ce) || ce.Dialect != to || ce.Index < 0 || ce.Index >= len(c.Messages) {
						t.Fatalf("want a CarryError naming a message, got %T %v", err, err)
					}
					goldenText(t, base+".refused.txt", err.Error()+"\n")
					return
				}
				golden(t, base+".json", view)
				if nativeErr != nil {
					return // nothing native to compare with: the input itself cannot be native
				}
				back := convert(t, to, "native", view)
				if a, b := sameValues(t, back, to), sameValues(t, wantNative, to); !reflect.DeepEqual(a, b) {
					t.Fatalf("%s -> %s -> native lost something:\n got %s\nwant %s", in.dialect, to, back, wantNative)
				}
			})
		}
	}
}

// sameValues is a native conversation as the values it holds, without what a view may spell
// differently: a plain-string content is one text part, an optional member null (or an isError
// false) is left out, and after openai-responses, whose items are finer than messages, consecutive
// assistant messages are one (the message's members are on its last item).
func sameValues(t *testing.T, native []byte, via string) []any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(native))
	d.UseNumber()
	var msgs []any
	if err := d.Decode(&msgs); err != nil {
		t.Fatal(err)
	}
	var out []any
	for _, m := range msgs {
		m = normalize(m)
		if via == "openai-responses" && len(out) > 0 && role(out[len(out)-1]) == "assistant" && role(m) == "assistant" {
			prev, cur := out[len(out)-1].(map[string]any), m.(map[string]any)
			cur["content"] = append(prev["content"].([]any), cur["content"].([]any)...)
			out[len(out)-1] = cur
			continue
		}
		out = append(out, m)
	}
	return out
}

func role(m any) string {
	o, _ := m.(map[string]any)
	s, _ := o["role"].(string)
	return s
}

func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "content" {
				x = []any{map[string]any{"type": "text", "text": s}}
			}
			if x == nil || (k == "isError" && x == false) {
				delete(v, k)
				continue
			}
			v[k] = normalize(x)
		}
	case []any:
		for i := range v {
			v[i] = normalize(v[i])
		}
	}
	return v
}

// goldenText compares got with testdata/name, or rewrites it with -update.
func goldenText(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("%s differs (go test -update to rewrite, then review):\n got %s\nwant %s", name, got, want)
	}
}

// anthropic refuses what it has no place for, by name.
func TestViewAnthropicRefuses(t *testing.T) {
	cases := []struct{ in, what string }{
		{`[{"role":"extension","kind":"compaction","data":{"summary":"s"}}]`, `kind "compaction"`},
		{`[{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"n","arguments":{}},{"type":"image","url":"https://x/y.png"}]}]`, "content[1]: a image part"},
		{`[{"role":"user","content":[{"type":"image","data":"AAAA"}]}]`, "content[0]: an image needs"},
	}
	for _, tc := range cases {
		c, err := Decode("native", []byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Encode("anthropic")
		var ce *CarryError
		if !errors.As(err, &ce) || !errors.Is(err, ErrNoConversion) || !strings.Contains(ce.What, tc.what) {
			t.Errorf("%s: want a CarryError naming %q, got %v", tc.in, tc.what, err)
		}
	}
}

// A member a view reads back only when it holds native's kind: a string timestamp from openai-chat
// stays as it came (and native, whose timestamp is a number, refuses it by name) rather than
// vanishing; an unknown member of a name the view writes is refused, not written twice.
func TestViewCarriedMembersNeverVanish(t *testing.T) {
	c, err := Decode("openai-chat", []byte(`[{"role":"user","content":"x","timestamp":"2024-01-01T00:00:00Z"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Messages[0].Extra) != 1 || c.Messages[0].Extra[0].Name != "timestamp" {
		t.Fatalf("extra %+v", c.Messages[0].Extra)
	}
	var ce *CarryError
	if _, err := c.Encode("native"); !errors.As(err, &ce) || !strings.Contains(err.Error(), "timestamp") {
		t.Fatalf("to native: %v", err)
	}
	n, err := Decode("native", []byte(`[{"role":"assistant","content":[{"type":"toolCall","id":"a","name":"f","arguments":{}}],"tool_calls":"mine"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Encode("openai-chat"); !errors.As(err, &ce) || !strings.Contains(ce.What, "member tool_calls") {
		t.Fatalf("to openai-chat: %v", err)
	}
}
