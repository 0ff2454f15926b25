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
	require.Contains(t, err.Error(), `"gpt" (known: anthropic, native, openai-chat`)
	require.NoError(t, CheckDialect(""))
	require.NoError(t, CheckDialect(DialectNative))
}

// TestParse_NativeRefusesOtherDialects: the refused examples stay refused as native (a
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
