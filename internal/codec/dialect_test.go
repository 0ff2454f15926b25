package codec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dialectFixture reads testdata/dialects/name.json.
func dialectFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../testdata/dialects", name+".json"))
	require.NoError(t, err)
	return b
}

// TestDialects_FixturesRoundTripAndCount: a real-looking history of each dialect is accepted,
// kept byte for byte (after compaction), and counted by role as docs/format.md says.
func TestDialects_FixturesRoundTripAndCount(t *testing.T) {
	cases := []struct {
		fixture, dialect string
		want             Stats
	}{
		{"native-serde", "", Stats{Messages: 5, User: 2, Assistant: 2, ToolResult: 1, ToolCalls: 1}},
		{"openai-chat", "openai-chat", Stats{Messages: 7, System: 2, User: 1, Assistant: 2, ToolResult: 2, ToolCalls: 2}},
		{"anthropic", "anthropic", Stats{Messages: 6, System: 1, User: 2, Assistant: 2, ToolResult: 1, ToolCalls: 1}},
		{"swift-agent", "swift-agent", Stats{Messages: 4, User: 1, Assistant: 2, ToolResult: 1, ToolCalls: 1}},
		{"agentsquad", "agentsquad", Stats{Messages: 6, User: 2, Assistant: 3, ToolResult: 1, ToolCalls: 1}},
		{"openai-responses", "openai-responses", Stats{Messages: 6, System: 1, User: 1, Assistant: 3, ToolResult: 1, ToolCalls: 1}},
		{"antigravity", "antigravity", Stats{Messages: 6, System: 1, User: 1, Assistant: 2, Extension: 2, ToolCalls: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.fixture, func(t *testing.T) {
			raw := dialectFixture(t, tc.fixture)
			c, err := ParseLimited(raw, Limits{Dialect: tc.dialect})
			require.NoError(t, err)
			require.Equal(t, tc.want, c.Stats())
			canon, err := compact(raw)
			require.NoError(t, err)
			require.Equal(t, string(canon), string(c.Encode()), "every byte kept")
		})
	}
}

// TestParse_NativeAcceptsNullOptionals: the phi-core history serde writes (optional fields as
// null) is native; a null where a value is required is still refused, naming the field.
func TestParse_NativeAcceptsNullOptionals(t *testing.T) {
	_, err := Parse([]byte(`[{"role":"assistant","content":[{"type":"text","text":"hi"}],"errorMessage":null,"usage":null,"stopReason":null,"timestamp":null}]`))
	require.NoError(t, err)
	for _, tc := range []struct{ payload, where string }{
		{`[{"role":null,"content":"x"}]`, "message 0: role: malformed checkpoint: want a string, found null"},
		{`[{"role":"toolResult","toolCallId":null,"content":"x"}]`, "message 0: toolCallId:"},
		{`[{"role":"user","content":[{"type":"image","data":null,"url":null}]}]`, "message 0: content[0]:"},
		{`[{"role":"assistant","content":[],"usage":{"input":null,"output":-1}}]`, "message 0: usage.output:"},
	} {
		_, err := Parse([]byte(tc.payload))
		require.ErrorIs(t, err, ErrMalformed, tc.payload)
		require.Contains(t, err.Error(), tc.where)
	}
}

// TestParse_UnknownDialect names the dialect and the known ones.
func TestParse_UnknownDialect(t *testing.T) {
	_, err := ParseLimited([]byte(`[]`), Limits{Dialect: "gpt"})
	require.ErrorIs(t, err, ErrUnknownDialect)
	require.Contains(t, err.Error(), `"gpt" (known: agentsquad, anthropic, antigravity, native, openai-chat, openai-responses, swift-agent)`)
	require.NoError(t, CheckDialect(""))
	require.NoError(t, CheckDialect(DialectNative))
}

// TestParse_NativeRefusesOtherDialects: the issue's refused examples stay refused as native (a
// dialect is named, never guessed).
func TestParse_NativeRefusesOtherDialects(t *testing.T) {
	_, err := Parse([]byte(`[{"role":"system","content":"be brief"}]`))
	require.ErrorIs(t, err, ErrUnknownRole)
}

// refusal is a payload a dialect refuses, with the sentinel and the "message N: field" it names.
type refusal struct {
	name, payload string
	err           error
	where         string
}

func checkRefusals(t *testing.T, dialect string, cases []refusal) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseLimited([]byte("["+tc.payload+"]"), Limits{Dialect: dialect})
			require.Error(t, err)
			require.True(t, errors.Is(err, tc.err), "%v is not %v", err, tc.err)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			require.True(t, strings.HasPrefix(err.Error(), tc.where), "%q does not start with %q", err, tc.where)
		})
	}
}

func TestParse_OpenAIChatRefusals(t *testing.T) {
	ok := `{"role":"user","content":"hi"},`
	checkRefusals(t, "openai-chat", []refusal{
		{"unknown role", ok + `{"role":"function","content":"x"}`, ErrUnknownRole, "message 1: role:"},
		{"native part", ok + `{"role":"user","content":[{"type":"image","url":"x"}]}`, ErrUnknownContentType, "message 1: content[0].type:"},
		{"image_url without url", `{"role":"user","content":[{"type":"image_url","image_url":{}}]}`, ErrMalformed, "message 0: content[0].image_url.url:"},
		{"image in system", `{"role":"system","content":[{"type":"image_url","image_url":{"url":"x"}}]}`, ErrUnknownContentType, "message 0: content[0].type:"},
		{"assistant with nothing", `{"role":"assistant","content":null}`, ErrMalformed, "message 0: content:"},
		{"tool call arguments as object", `{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{}}}]}`, ErrMalformed, "message 0: tool_calls[0].function.arguments:"},
		{"tool call without id", `{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}`, ErrMalformed, "message 0: tool_calls[0].id:"},
		{"tool without tool_call_id", `{"role":"tool","content":"22"}`, ErrMalformed, "message 0: tool_call_id:"},
		{"name not a string", `{"role":"user","content":"x","name":3}`, ErrMalformed, "message 0: name:"},
	})
}

func TestParse_AnthropicRefusals(t *testing.T) {
	user := `{"role":"user","content":"hi"},`
	checkRefusals(t, "anthropic", []refusal{
		{"system not first", user + `{"role":"system","content":"x"}`, ErrMalformed, "message 1: role:"},
		{"unknown role", `{"role":"tool","content":"x"}`, ErrUnknownRole, "message 0: role:"},
		{"tool_use in a user message", `{"role":"user","content":[{"type":"tool_use","id":"t","name":"n","input":{}}]}`, ErrUnknownContentType, "message 0: content[0].type:"},
		{"tool_use input not an object", `{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":"{}"}]}`, ErrMalformed, "message 0: content[0].input:"},
		{"image without source", `{"role":"user","content":[{"type":"image"}]}`, ErrMalformed, "message 0: content[0].source:"},
		{"image source unknown", `{"role":"user","content":[{"type":"image","source":{"type":"path","path":"a.png"}}]}`, ErrUnknownContentType, "message 0: content[0].source.type:"},
		{"tool_result nested bad block", `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"tool_use"}]}]}`, ErrUnknownContentType, "message 0: content[0].content[0].type:"},
		{"thinking without thinking", `{"role":"assistant","content":[{"type":"thinking","signature":"s"}]}`, ErrMalformed, "message 0: content[0].thinking:"},
	})
}

// TestParse_AnthropicSystemFirstOnly: an append's first message is not the conversation's first,
// so a system message there is refused (Limits.Continues).
func TestParse_AnthropicSystemFirstOnly(t *testing.T) {
	sys := []byte(`[{"role":"system","content":"be brief"}]`)
	_, err := ParseLimited(sys, Limits{Dialect: "anthropic"})
	require.NoError(t, err)
	_, err = ParseLimited(sys, Limits{Dialect: "anthropic", Continues: true})
	require.ErrorIs(t, err, ErrMalformed)
}

// TestImagePaths_Dialects: the image-path policy finds local files in each dialect's image shape.
func TestImagePaths_Dialects(t *testing.T) {
	cases := []struct{ dialect, payload, field, redacted string }{
		{"openai-chat", `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"file:///Users/alice/cat.png"}}]}]`,
			"content[0].image_url.url", `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"redacted:local-file.png"}}]}]`},
		{"anthropic", `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"url","url":"/home/bob/shot.jpg"}}]}]}]`,
			"content[0].content[0].source.url", `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"url","url":"redacted:local-file.jpg"}}]}]}]`},
		{"anthropic", `[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"~/notes/plan.pdf"}}]}]`,
			"content[0].source.url", `[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"redacted:local-file.pdf"}}]}]`},
		{"swift-agent", `[{"role":"user","content":[{"type":"toolResult","toolCallId":"c","content":[{"type":"image","fileURL":"file:///Users/alice/shot.png","mimeType":"image/png"}]}]}]`,
			"content[0].content[0].fileURL", `[{"role":"user","content":[{"type":"toolResult","toolCallId":"c","content":[{"type":"image","fileURL":"redacted:local-file.png","mimeType":"image/png"}]}]}]`},
		{"openai-responses", `[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"C:\\Users\\bob\\a.gif"}]}]`,
			"output[0].image_url", `[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"redacted:local-file.gif"}]}]`},
	}
	for _, tc := range cases {
		t.Run(tc.dialect, func(t *testing.T) {
			_, err := ParseLimited([]byte(tc.payload), Limits{Dialect: tc.dialect, ImagePaths: ImagePathsRefuse})
			require.ErrorIs(t, err, ErrLocalPath)
			require.Contains(t, err.Error(), "message 0: "+tc.field)
			c, err := ParseLimited([]byte(tc.payload), Limits{Dialect: tc.dialect, ImagePaths: ImagePathsRedact})
			require.NoError(t, err)
			require.Equal(t, tc.redacted, string(c.Encode()))
		})
	}
}

// TestParse_IssueExamples: the four histories the issue found refused are accepted in their
// dialect, and kept byte for byte.
func TestParse_IssueExamples(t *testing.T) {
	for _, tc := range []struct{ dialect, payload string }{
		{"swift-agent", `[{"role":"user","content":[{"type":"toolResult","toolCallId":"c1","content":[{"type":"text","text":"22°C"}],"isError":false}]}]`},
		{"agentsquad", `[{"role":"assistant","content":[{"text":"hi"}],"timestamp":1700000001}]`},
		{"", `[{"role":"assistant","content":[{"type":"text","text":"hi"}],"errorMessage":null}]`},
		{"openai-chat", `[{"role":"system","content":"You are terse."},{"role":"user","content":"hi"}]`},
	} {
		c, err := ParseLimited([]byte(tc.payload), Limits{Dialect: tc.dialect})
		require.NoError(t, err, tc.dialect)
		require.Equal(t, tc.payload, string(c.Encode()))
	}
}

func TestParse_SwiftAgentRefusals(t *testing.T) {
	checkRefusals(t, "swift-agent", []refusal{
		{"native role", `{"role":"toolResult","toolCallId":"c1","content":[]}`, ErrUnknownRole, "message 0: role:"},
		{"content as a string", `{"role":"user","content":"hi"}`, ErrMalformed, "message 0: content:"},
		{"toolResult in an assistant message", `{"role":"assistant","content":[{"type":"toolResult","toolCallId":"c","content":[]}]}`, ErrUnknownContentType, "message 0: content[0].type:"},
		{"toolResult without toolCallId", `{"role":"user","content":[{"type":"toolResult","content":[]}]}`, ErrMalformed, "message 0: content[0].toolCallId:"},
		{"toolResult isError not a boolean", `{"role":"user","content":[{"type":"toolResult","toolCallId":"c","content":[],"isError":"no"}]}`, ErrMalformed, "message 0: content[0].isError:"},
		{"nested toolCall", `{"role":"user","content":[{"type":"toolResult","toolCallId":"c","content":[{"type":"toolCall"}]}]}`, ErrUnknownContentType, "message 0: content[0].content[0].type:"},
		{"image without data or fileURL", `{"role":"user","content":[{"type":"image","mimeType":"image/png"}]}`, ErrMalformed, "message 0: content[0]:"},
		{"toolCall arguments a number", `{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"f","arguments":1}]}`, ErrMalformed, "message 0: content[0].arguments:"},
	})
}

func TestParse_AgentSquadRefusals(t *testing.T) {
	checkRefusals(t, "agentsquad", []refusal{
		{"system role", `{"role":"system","content":[{"text":"x"}]}`, ErrUnknownRole, "message 0: role:"},
		{"block with no known key", `{"role":"user","content":[{"type":"text","value":"x"}]}`, ErrUnknownContentType, "message 0: content[0]:"},
		{"block with two keys", `{"role":"user","content":[{"text":"x","toolUse":{}}]}`, ErrMalformed, "message 0: content[0]:"},
		{"text not a string", `{"role":"user","content":[{"text":7}]}`, ErrMalformed, "message 0: content[0].text:"},
		{"toolUse input a string", `{"role":"assistant","content":[{"toolUse":{"toolUseId":"t","name":"n","input":"{}"}}]}`, ErrMalformed, "message 0: content[0].toolUse.input:"},
		{"toolResult without content", `{"role":"user","content":[{"toolResult":{"toolUseId":"t"}}]}`, ErrMalformed, "message 0: content[0].toolResult.content:"},
		{"timestamp a string", `{"role":"user","content":[{"text":"x"}],"timestamp":"now"}`, ErrMalformed, "message 0: timestamp:"},
	})
}

func TestParse_OpenAIResponsesRefusals(t *testing.T) {
	checkRefusals(t, "openai-responses", []refusal{
		{"unknown item type", `{"type":"hosted_tool_call","id":"h_1"}`, ErrUnknownContentType, "message 0: type:"},
		{"web_search_call without its action", `{"type":"web_search_call","id":"ws_1","status":"completed"}`, ErrMalformed, "message 0: action: malformed checkpoint: missing"},
		{"computer_call_output whose output is a string", `{"type":"computer_call_output","call_id":"c1","output":"png"}`, ErrMalformed, "message 0: output: malformed checkpoint: want an object"},
		{"mcp approval that is not a boolean", `{"type":"mcp_approval_response","approval_request_id":"a1","approve":"yes"}`, ErrMalformed, "message 0: approve: malformed checkpoint: want a boolean"},
		{"custom tool call with an empty call_id", `{"type":"custom_tool_call","call_id":"","input":"x","name":"n"}`, ErrMalformed, "message 0: call_id: malformed checkpoint: must not be empty"},
		{"neither type nor role", `{"content":"x"}`, ErrMalformed, "message 0: type:"},
		{"tool role", `{"role":"tool","content":"x"}`, ErrUnknownRole, "message 0: role:"},
		{"output_text in a user message", `{"role":"user","content":[{"type":"output_text","text":"x"}]}`, ErrUnknownContentType, "message 0: content[0].type:"},
		{"function_call without call_id", `{"type":"function_call","name":"f","arguments":"{}"}`, ErrMalformed, "message 0: call_id:"},
		{"function_call arguments an object", `{"type":"function_call","call_id":"c","name":"f","arguments":{}}`, ErrMalformed, "message 0: arguments:"},
		{"output missing", `{"type":"function_call_output","call_id":"c"}`, ErrMalformed, "message 0: output:"},
		{"reasoning summary bad part", `{"type":"reasoning","summary":[{"type":"text","text":"x"}]}`, ErrUnknownContentType, "message 0: summary[0].type:"},
		{"input_image with nothing", `{"role":"user","content":[{"type":"input_image","detail":"low"}]}`, ErrMalformed, "message 0: content[0]:"},
	})
}

// TestAnnotate_AgentSquadBlocks: the merged cross-agent view attributes an agentsquad message's
// first text block (which has no "type") as "[agentId] …".
func TestAnnotate_AgentSquadBlocks(t *testing.T) {
	in := `{"role":"assistant","content":[{"toolUse":{"toolUseId":"t","name":"n","input":{"text":"no"}}},{"text":"Booked."}],"timestamp":1700000005000}`
	want := `{"role":"assistant","content":[{"toolUse":{"toolUseId":"t","name":"n","input":{"text":"no"}}},{"text":"[booking] Booked."}],"timestamp":1700000005000,"agentId":"booking"}`
	got := Annotate([]byte(in), "booking", true)
	require.Equal(t, want, string(got))
	_, err := ParseLimited([]byte("["+string(got)+"]"), Limits{Dialect: "agentsquad"})
	require.NoError(t, err, "still an agentsquad message")
}

func TestParse_AntigravityRefusals(t *testing.T) {
	checkRefusals(t, "antigravity", []refusal{
		{"a native message", `{"role":"user","content":"hi"}`, ErrMalformed, "message 0: id:"},
		{"step_index negative", `{"id":"s","step_index":-1,"type":"Finish"}`, ErrMalformed, "message 0: step_index:"},
		{"step_index a fraction", `{"id":"s","step_index":1.5,"type":"Finish"}`, ErrMalformed, "message 0: step_index:"},
		{"unknown step type", `{"id":"s","step_index":0,"type":"Browse"}`, ErrUnknownContentType, "message 0: type:"},
		{"content an object", `{"id":"s","step_index":0,"type":"TextResponse","content":{}}`, ErrMalformed, "message 0: content:"},
		{"tool call without name", `{"id":"s","step_index":0,"type":"ToolCall","tool_calls":[{"id":"t"}]}`, ErrMalformed, "message 0: tool_calls[0].name:"},
		{"negative token count", `{"id":"s","step_index":0,"type":"Finish","usage_metadata":{"total_token_count":-3}}`, ErrMalformed, "message 0: usage_metadata.total_token_count:"},
	})
}

// Every input item of the Responses API is accepted with the members the API requires, kept as it
// is, and counted: calls as the assistant's tool calls, outputs as tool results.
func TestParse_OpenAIResponsesEveryInputItem(t *testing.T) {
	items := []string{
		`{"role":"user","content":"go"}`,
		`{"type":"file_search_call","id":"fs_1","queries":["q"],"status":"completed","results":null}`,
		`{"type":"computer_call","id":"cu_1","call_id":"c1","pending_safety_checks":[],"status":"completed","action":{"type":"click","x":1,"y":2,"button":"left"}}`,
		`{"type":"computer_call_output","call_id":"c1","output":{"type":"computer_screenshot","image_url":"data:image/png;base64,AAAA"}}`,
		`{"type":"web_search_call","id":"ws_1","action":{"type":"search","query":"q"},"status":"completed"}`,
		`{"type":"tool_search_call","arguments":{"q":"x"},"execution":"server"}`,
		`{"type":"tool_search_output","tools":[]}`,
		`{"type":"additional_tools","role":"developer","tools":[]}`,
		`{"type":"configuration_update","reasoning":{"effort":"low"}}`,
		`{"type":"compaction","encrypted_content":"gAAAA"}`,
		`{"type":"compaction_trigger"}`,
		`{"type":"image_generation_call","id":"ig_1","result":null,"status":"generating"}`,
		`{"type":"code_interpreter_call","id":"ci_1","code":"print(1)","container_id":"cntr","outputs":null,"status":"completed"}`,
		`{"type":"local_shell_call","id":"ls_1","call_id":"c2","action":{"type":"exec","command":["ls"]},"status":"completed"}`,
		`{"type":"local_shell_call_output","id":"c2","output":"a\nb"}`,
		`{"type":"shell_call","call_id":"c3","action":{"commands":["ls"]}}`,
		`{"type":"shell_call_output","call_id":"c3","output":[]}`,
		`{"type":"apply_patch_call","call_id":"c4","operation":{"type":"delete_file","path":"x"},"status":"completed"}`,
		`{"type":"apply_patch_call_output","call_id":"c4","status":"completed","output":null}`,
		`{"type":"mcp_list_tools","id":"ml_1","server_label":"s","tools":[]}`,
		`{"type":"mcp_approval_request","id":"ma_1","arguments":"{}","name":"n","server_label":"s"}`,
		`{"type":"mcp_approval_response","approval_request_id":"ma_1","approve":true}`,
		`{"type":"mcp_call","id":"mc_1","arguments":"{}","name":"n","server_label":"s","output":"ok"}`,
		`{"type":"custom_tool_call","call_id":"c5","input":"x","name":"grammar"}`,
		`{"type":"custom_tool_call_output","call_id":"c5","output":[{"type":"input_text","text":"ok"}]}`,
		`{"type":"item_reference","id":"msg_1"}`,
		`{"id":"msg_2"}`,
		`{"type":null,"id":"msg_3"}`,
		`{"type":"program","id":"p_1","call_id":"c6","code":"x","fingerprint":"f"}`,
		`{"type":"program_output","id":"po_1","call_id":"c6","result":"1","status":"completed"}`,
	}
	payload := "[" + strings.Join(items, ",") + "]"
	c, err := ParseLimited([]byte(payload), Limits{Dialect: "openai-responses"})
	require.NoError(t, err)
	require.Equal(t, payload, string(c.Encode()), "kept as it is")
	st := c.Stats()
	require.Equal(t, len(items), st.Messages)
	require.Equal(t, 12, st.ToolCalls)
	require.Equal(t, 14, st.Assistant)
	require.Equal(t, 7, st.ToolResult)
	require.Equal(t, 2, st.User)
	require.Equal(t, 1, st.System)
	require.Equal(t, 6, st.Extension)
}
