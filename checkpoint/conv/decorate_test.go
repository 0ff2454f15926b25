package conv

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// Send-time decorations go on the view only: the golden decorated view has the cache markers and
// the reminder, and the conversation it came from encodes as before, byte for byte.
func TestView_DecorationsOnACopy(t *testing.T) {
	in, err := os.ReadFile("testdata/native.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode("native", in)
	if err != nil {
		t.Fatal(err)
	}
	view, _, err := c.View("anthropic", ViewOptions{CacheControl: 2, Reminder: "Answer in one line."})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "pairs/native-weather.as-anthropic.decorated.json", view)
	if n := bytes.Count(view, []byte(`"cache_control"`)); n != 2 {
		t.Fatalf("%d cache markers, want 2", n)
	}
	if back, err := c.Encode("native"); err != nil || !bytes.Equal(back, canonical(t, in)) {
		t.Fatalf("the conversation changed under its view: %v\n%s", err, back)
	}
	plain, _, err := c.View("anthropic", ViewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := c.Encode("anthropic"); !bytes.Equal(plain, want) {
		t.Fatal("a view without options differs from Encode")
	}
}

// A cache marker has a place only in anthropic.
func TestView_CacheControlOnlyAnthropic(t *testing.T) {
	c := &Conversation{Messages: []Message{{Role: RoleUser, Content: []Part{Text("hi")}}}}
	if _, _, err := c.View("openai-chat", ViewOptions{CacheControl: 1}); !errors.Is(err, ErrViewOption) {
		t.Fatalf("got %v, want ErrViewOption", err)
	}
}

// A real pi session with a compaction, its request view (from the marker on) as openai-chat: the
// marker becomes the user message of its summary, and every message is either in the view or
// counted as left out, by kind: nothing is dropped silently.
func TestView_RequestViewOfARealSession(t *testing.T) {
	in, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	if err != nil {
		t.Fatal(err)
	}
	full, err := Decode("native", in)
	if err != nil {
		t.Fatal(err)
	}
	last := -1
	for i, m := range full.Messages {
		if m.IsCompaction() {
			last = i
		}
	}
	if last < 0 {
		t.Fatal("no compaction in the fixture")
	}
	req := &Conversation{Messages: full.Messages[last:]}
	view, omitted, err := req.View("openai-chat", ViewOptions{OmitThinking: true, OmitExtensions: true, CompactionAsUser: true})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]any
	if err := json.Unmarshal(view, &msgs); err != nil {
		t.Fatal(err)
	}
	if first, _ := msgs[0]["content"].(string); msgs[0]["role"] != "user" || !strings.HasPrefix(first, CompactionPreamble) {
		t.Fatalf("first message %v", msgs[0])
	}
	left, thinking := 0, 0
	for _, m := range req.Messages[1:] {
		switch {
		case m.Role == RoleExtension:
			left++
		default:
			for _, p := range m.Content {
				if p.Type == PartThinking {
					thinking++
				}
			}
		}
	}
	counted := 0
	for what, n := range omitted {
		if what != "thinking" {
			counted += n
		}
	}
	if counted != left || omitted["thinking"] != thinking || len(msgs)+counted != len(req.Messages) {
		t.Fatalf("view of %d messages: %d written, omitted %v; want %d extensions and %d thinking parts counted",
			len(req.Messages), len(msgs), omitted, left, thinking)
	}
	// Without OmitThinking the view refuses, naming the message of the conversation (not of the view).
	_, _, err = req.View("openai-chat", ViewOptions{OmitExtensions: true, CompactionAsUser: true})
	var ce *CarryError
	if !errors.As(err, &ce) || len(req.Messages[ce.Index].Content) == 0 || !strings.Contains(ce.What, "thinking") {
		t.Fatalf("got %v", err)
	}
	hasThinking := false
	for _, p := range req.Messages[ce.Index].Content {
		hasThinking = hasThinking || p.Type == PartThinking
	}
	if !hasThinking {
		t.Fatalf("refusal names message %d, which holds no thinking", ce.Index)
	}
}

// A refusal names the message of the conversation even when messages before it were left out of
// the view.
func TestView_RefusalNamesTheConversationsMessage(t *testing.T) {
	c, err := Decode("native", []byte(`[{"role":"extension","kind":"session_header","data":{}},{"role":"extension","kind":"model_change","data":{}},`+
		`{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"hmm"}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.View("openai-chat", ViewOptions{OmitExtensions: true})
	var ce *CarryError
	if !errors.As(err, &ce) || ce.Index != 3 {
		t.Fatalf("got %v, want a CarryError naming message 3", err)
	}
}

// OmitMembers leaves each message with only what the provider's API takes, counting the rest by
// name; the parts keep their own members (a cache marker, a thinking signature).
func TestView_OmitMembers(t *testing.T) {
	in, err := os.ReadFile("testdata/native.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode("native", in)
	if err != nil {
		t.Fatal(err)
	}
	view, omitted, err := c.View("anthropic", ViewOptions{OmitMembers: true, CacheControl: 1})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(view, &msgs); err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		for k := range m {
			if k != "role" && k != "content" {
				t.Fatalf("message %d keeps %q", i, k)
			}
		}
	}
	// native.json: 4 timestamps, 2 models, 2 stop reasons, a usage, a provider, and the toolName
	// carried on the tool_result block.
	want := Omitted{"member timestamp": 4, "member model": 2, "member stop_reason": 2, "member usage": 1, "member provider": 1, "member toolName": 1}
	if !reflect.DeepEqual(omitted, want) || !bytes.Contains(view, []byte(`"cache_control"`)) || bytes.Contains(view, []byte(`"toolName"`)) {
		t.Fatalf("omitted %v\n%s", omitted, view)
	}
	if _, _, err := c.View("native", ViewOptions{OmitMembers: true}); !errors.Is(err, ErrViewOption) {
		t.Fatalf("native: %v", err)
	}
}
