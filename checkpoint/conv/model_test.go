package conv

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// A big integer, a number no float64 holds, escapes and astral-plane text survive decoding, a
// change to one field, and encoding: only the changed member is written anew.
func TestBigNumbersAndAstralTextSurviveAChange(t *testing.T) {
	in := `[{"role":"assistant","content":[{"type":"text","text":"\ud83d\ude00 𝄞 <b>"},{"type":"text","text":"old","x":[1.50,-0.0]}],` +
		`"usage":{"input":123456789012345678901234567890,"output":1e400,"cost":{"total":0.1000000000000000055511151231257827}},` +
		`"timestamp":9007199254740993,"future":{"a":1,"a":2}}]`
	c, err := Decode("native", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	m := &c.Messages[0]
	if m.Usage.Input != "123456789012345678901234567890" || m.Usage.Output != "1e400" || m.Timestamp != "9007199254740993" {
		t.Fatalf("numbers read back as %q %q %q", m.Usage.Input, m.Usage.Output, m.Timestamp)
	}
	if m.Content[0].Text != "😀 𝄞 <b>" {
		t.Fatalf("text %q", m.Content[0].Text)
	}
	m.Content[1].Text = "new 𐍈"
	out, err := c.Encode("native")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(in, `"text":"old"`, `"text":"new 𐍈"`, 1)
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

// Unset optional fields that came as null stay null; a cleared field is left out; a new one is
// added after the members that came.
func TestNullsAndChangedMembers(t *testing.T) {
	in := `[{"role":"assistant","content":[],"model":"m1","api":null,"usage":null,"errorMessage":null,"z":true}]`
	c, err := Decode("", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	m := &c.Messages[0]
	m.Model, m.Provider = "", "p"
	m.Usage = &Usage{Input: "1", Output: "2"}
	out, err := c.Encode("")
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"role":"assistant","content":[],"api":null,"usage":{"input":1,"output":2},"errorMessage":null,"z":true,"provider":"p"}]`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

// A conversation built with the model encodes to a valid native conversation and reads back.
func TestBuildAndReadBack(t *testing.T) {
	c := &Conversation{Messages: []Message{
		{Role: RoleUser, Content: []Part{Text("Weather in Paris?"), ImageData("iVBORw0KGgo=", "image/png")}, Timestamp: "1700000000000"},
		{Role: RoleAssistant, Content: []Part{Thinking("use the tool"), ToolCall("c1", "get_weather", json.RawMessage(`{"city":"Paris"}`))},
			Model: "m", Provider: "p", StopReason: "toolUse", Usage: &Usage{Input: "10", Output: "5", Total: "15"}},
		{Role: RoleToolResult, ToolCallID: "c1", ToolName: "get_weather", Content: []Part{Text("22°C")}, IsError: true},
		{Role: RoleExtension, Kind: KindCompaction, Data: json.RawMessage(`{"summary":"asked for weather"}`)},
	}}
	out, err := c.Encode("native")
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode("native", out)
	if err != nil {
		t.Fatal(err)
	}
	a, tr := back.Messages[1], back.Messages[2]
	if calls := a.ToolCalls(); len(calls) != 1 || calls[0].ID != tr.ToolCallID || string(calls[0].Arguments) != `{"city":"Paris"}` {
		t.Fatalf("tool call %+v / result %+v", calls, tr)
	}
	if !tr.IsError || a.Usage.Total != "15" || !back.Messages[3].IsCompaction() || back.Messages[0].Content[1].MIMEType != "image/png" {
		t.Fatalf("read back %s", out)
	}
}

// A message the model cannot make valid is refused with a typed error naming where, not written.
func TestEncodeRefusesWhatNativeCannotHold(t *testing.T) {
	c := &Conversation{Messages: []Message{{Role: RoleToolResult, Content: []Part{Text("x")}}}} // no tool call id
	_, err := c.Encode("native")
	var ce *CarryError
	var ve *codec.ValidationError
	if !errors.As(err, &ce) || !errors.As(err, &ve) || ve.Index != 0 || ve.Field != "toolCallId" {
		t.Fatalf("got %v", err)
	}
}

// Every dialect fixture maps into the model and out to a valid native conversation, each tool
// result paired with a tool call by id and no member dropped (every string of the input that the
// model does not read is still in the output).
func TestEveryDialectToNative(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/dialects/*.json")
	for _, f := range files {
		dialect := strings.TrimSuffix(filepath.Base(f), ".json")
		if dialect == "native-serde" {
			continue
		}
		t.Run(dialect, func(t *testing.T) {
			in, _ := os.ReadFile(f)
			c, err := Decode(dialect, in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := c.Encode("native")
			if want, refused := cannotCarry[dialect]; refused {
				var ce *CarryError
				if !errors.As(err, &ce) || !errors.Is(err, codec.ErrUnknownContentType) || ce.Index != want.index || !strings.Contains(err.Error(), want.what) {
					t.Fatalf("want a CarryError naming message %d and %s, got %v", want.index, want.what, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n, err := Decode("native", out)
			if err != nil {
				t.Fatal(err)
			}
			calls := map[string]bool{}
			for _, m := range n.Messages {
				for _, p := range m.ToolCalls() {
					calls[p.ID] = true
				}
				if m.Role == RoleToolResult && !calls[m.ToolCallID] {
					t.Errorf("tool result %q answers no earlier tool call", m.ToolCallID)
				}
			}
			if len(calls) == 0 {
				t.Error("no tool call mapped")
			}
		})
	}
}

// What native cannot carry in the fixtures: content kinds native has no part type for. The
// conversion refuses them by name rather than drop them.
var cannotCarry = map[string]struct {
	index int
	what  string
}{
	"agentsquad": {4, `"json"`},              // a toolResult's {"json": ...} block
	"anthropic":  {4, `"redacted_thinking"`}, // an encrypted thinking block
}

// Per-dialect spot checks of the mapping into the model.
func TestDialectMappings(t *testing.T) {
	cases := []struct {
		dialect, in string
		check       func(c *Conversation) bool
	}{
		{"swift-agent", `[{"role":"user","content":[{"type":"toolResult","toolCallId":"c1","content":[{"type":"text","text":"22°C"}],"isError":false}]}]`,
			func(c *Conversation) bool { // a pure tool-result message is a tool result
				m := c.Messages[0]
				return m.Role == RoleToolResult && m.ToolCallID == "c1" && m.TextOf() == "22°C"
			}},
		{"agentsquad", `[{"role":"assistant","content":[{"text":"hi"}],"timestamp":1700000001}]`,
			func(c *Conversation) bool {
				return c.Messages[0].TextOf() == "hi" && c.Messages[0].Timestamp == "1700000001"
			}},
		{"openai-chat", `[{"role":"system","content":"be brief"},{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}}]}]`,
			func(c *Conversation) bool {
				tc := c.Messages[1].ToolCalls()
				return c.Messages[0].Role == RoleSystem && len(tc) == 1 && string(tc[0].Arguments) == `{"x":1}`
			}},
		{"antigravity", `[{"id":"s1","step_index":0,"type":"Compaction","source":"SYSTEM","content":"sum"}]`,
			func(c *Conversation) bool {
				return c.Messages[0].IsCompaction() && string(c.Messages[0].Data) == `{"summary":"sum"}`
			}},
		{"anthropic", `[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{}}],"usage":{"input_tokens":3,"output_tokens":4}}]`,
			func(c *Conversation) bool {
				return c.Messages[0].Usage.Output == "4" && c.Messages[0].ToolCalls()[0].ID == "t"
			}},
	}
	for _, tc := range cases {
		c, err := Decode(tc.dialect, []byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.dialect, err)
		}
		if !tc.check(c) {
			t.Errorf("%s: mapped as %+v", tc.dialect, c.Messages)
		}
	}
}

// A message changed after decoding is written anew in its own dialect (the others as they came);
// antigravity, which is written only from its own steps, refuses it with a typed error naming it.
func TestChangedMessageWrittenAnew(t *testing.T) {
	c, err := Decode("swift-agent", []byte(`[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"user","content":[{"type":"text","text":"b"}],"id":"u2"}]`))
	if err != nil {
		t.Fatal(err)
	}
	c.Messages[1].Content[0].Text = "changed"
	got, err := c.Encode("swift-agent")
	if want := `[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"user","content":[{"type":"text","text":"changed"}],"id":"u2"}]`; err != nil || string(got) != want {
		t.Fatalf("got %s, %v\nwant %s", got, err, want)
	}
	a, err := Decode("antigravity", []byte(`[{"id":"s1","step_index":0,"type":"TextResponse","source":"USER","content":"a"}]`))
	if err != nil {
		t.Fatal(err)
	}
	a.Messages[0].Content[0].Text = "changed"
	_, err = a.Encode("antigravity")
	var ce *CarryError
	if !errors.As(err, &ce) || ce.Index != 0 || !errors.Is(err, ErrNoConversion) {
		t.Fatalf("got %v", err)
	}
}

// Sanity: the unchanged path of the encoder is exercised by the typed fields, not bypassed: a
// message whose typed field no longer matches what came is written anew.
func TestUnchangedMeansTypedFieldsUnchanged(t *testing.T) {
	c, _ := Decode("native", []byte(`[{"role":"user","content":"\u0041"}]`))
	if got, _ := c.Encode("native"); !bytes.Equal(got, []byte(`[{"role":"user","content":"\u0041"}]`)) {
		t.Fatalf("escape not kept: %s", got)
	}
	c.Messages[0].Content[0].Text = "B"
	if got, _ := c.Encode("native"); string(got) != `[{"role":"user","content":"B"}]` {
		t.Fatalf("change not written: %s", got)
	}
}

// A member that came from another dialect under a name native writes from the model (a reasoning
// item's own "content" beside the thinking decoded from its summary) is refused by name, not
// written twice.
func TestNativeRefusesAClashingMember(t *testing.T) {
	c, err := Decode("openai-responses", []byte(`[{"type":"reasoning","summary":[{"type":"summary_text","text":"s"}],"content":[{"type":"reasoning_text","text":"r"}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Encode("native")
	var ce *CarryError
	if !errors.As(err, &ce) || ce.Index != 0 || !strings.Contains(ce.What, "member content") {
		t.Fatalf("got %v", err)
	}
}
