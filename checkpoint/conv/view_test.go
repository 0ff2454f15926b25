package conv

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	golden(t, "native.as-openai-chat.json", view)
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
	golden(t, "openai-chat.as-native.json", native)
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

// The provider views between native, openai-chat and anthropic: each conversion of each input is
// a golden file, and converting the result back to where it came from gives the input's native
// form again (nothing lost on the way).
func TestViewPairs(t *testing.T) {
	inputs := map[string]string{"native": "testdata/native.json", "anthropic": "testdata/anthropic.json"}
	for from, file := range inputs {
		in, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		want := convert(t, from, "native", in)
		for _, to := range []string{"native", "openai-chat", "anthropic"} {
			if to == from {
				continue
			}
			t.Run(from+"-to-"+to, func(t *testing.T) {
				view := convert(t, from, to, in)
				golden(t, from+".as-"+to+".json", view)
				if back := convert(t, to, "native", view); !bytes.Equal(back, want) {
					t.Fatalf("%s -> %s -> native lost something:\n got %s\nwant %s", from, to, back, want)
				}
			})
		}
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
