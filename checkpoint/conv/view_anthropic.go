package conv

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Writing the model as anthropic (a provider view), by the same rule as openai-chat: carry
// everything or refuse. The system prompt is the first message (docs/format.md, anthropic); a tool
// result is a user message holding one tool_result block; an assistant's usage is written with
// anthropic's names (its total, which anthropic has not, as "totalTokens"); what else the model
// knows and anthropic has no field for (provider, api, errorMessage, timestamp, a result's
// toolName) is carried under its native name, and read back by decodeAnthropic. Refused: extension
// messages (but a native system_prompt), images outside user content, thinking and tool calls
// outside assistant messages, tool calls whose arguments are not an object, unknown part kinds.

func (m *Message) toAnthropic(index int) ([]json.RawMessage, error) {
	return m.writeSplit(index, true, (*Message).anthropicOne)
}

func (m *Message) anthropicOne(index int) ([]json.RawMessage, error) {
	refuse := refuser("anthropic", index)
	var ks []known
	switch m.Role {
	case RoleSystem:
		content, err := anthropicContent(m.Content, m.contentString, refuse, PartText)
		if err != nil {
			return nil, err
		}
		ks = []known{str("role", "system"), {name: "content", enc: content}}
		if m.sourceRole != "" && m.sourceRole != "system" {
			ks = append(ks, str("sourceRole", m.sourceRole)) // openai's developer
		}
	case RoleUser:
		content, err := anthropicContent(m.Content, m.contentString, refuse, PartText, PartImage, PartToolResult)
		if err != nil {
			return nil, err
		}
		ks = []known{str("role", "user"), {name: "content", enc: content}}
	case RoleToolResult:
		content, err := anthropicContent([]Part{m.nestResult()}, false, refuse, PartToolResult)
		if err != nil {
			return nil, err
		}
		ks = []known{str("role", "user"), {name: "content", enc: content}}
	case RoleAssistant:
		content, err := anthropicContent(m.Content, false, refuse, PartText, PartThinking, PartToolCall)
		if err != nil {
			return nil, err
		}
		ks = []known{str("role", "assistant"), {name: "content", enc: content}, str("model", m.Model), str("stop_reason", anthropicStops.out(m.StopReason))}
		if m.Usage != nil {
			u := m.Usage
			ks = append(ks, known{name: "usage", enc: object{}.encode([]known{num("input_tokens", u.Input), num("output_tokens", u.Output),
				num("cache_read_input_tokens", u.CacheRead), num("cache_creation_input_tokens", u.CacheWrite), num("totalTokens", u.Total)}, u.Extra)})
		}
	case RoleExtension:
		if sys, ok := m.fromSystemPrompt(); ok {
			return sys.anthropicOne(index)
		}
		return nil, refuse(fmt.Sprintf("extension message of kind %q (anthropic has no place for it)", m.Kind))
	default:
		return nil, refuse(fmt.Sprintf("role %q", m.Role))
	}
	carried := without(carriedFor(m.Role), "model", "stopReason", "usage")
	if m.Role == RoleToolResult {
		carried = carriedOther // toolName and isError are on the tool_result block
	}
	ks = append(ks, m.carriedKnown(carried...)...)
	b, err := withExtra(ks, m.Extra, refuse)
	if err != nil {
		return nil, err
	}
	return []json.RawMessage{b}, nil
}

// anthropicContent writes parts as anthropic content: a plain string when they came so and are one
// bare text, else an array of blocks of the allowed kinds.
func anthropicContent(parts []Part, asString bool, refuse func(string) error, allowed ...PartType) ([]byte, error) {
	return viewContent("anthropic", parts, asString, refuse, allowed, anthropicBlockOf)
}

// viewContent writes parts in a dialect's content shape: a plain string when they came so and
// are one bare text, else an array of the blocks block writes, each of an allowed type; any other
// part is refused, naming it.
func viewContent(dialect string, parts []Part, asString bool, refuse func(string) error, allowed []PartType,
	block func(p Part, i int, refuse func(string) error) ([]byte, error)) ([]byte, error) {
	if asString && len(parts) == 1 && parts[0].Type == PartText && len(parts[0].Extra) == 0 {
		return encodeString(parts[0].Text), nil
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, p := range parts {
		if allowed != nil && !containsType(allowed, p.Type) { // nil: any
			return nil, refuse(fmt.Sprintf("content[%d]: a %s part (%s has no place for it here)", i, p.Type, dialect))
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		b, err := block(p, i, refuse)
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}

func anthropicBlockOf(p Part, i int, refuse func(string) error) ([]byte, error) {
	switch p.Type {
	case PartText:
		return object{}.encode([]known{str("type", "text"), {name: "text", enc: encodeString(p.Text)}}, p.Extra), nil
	case PartThinking:
		return object{}.encode([]known{str("type", "thinking"), {name: "thinking", enc: encodeString(p.Thinking)}}, p.Extra), nil
	case PartToolCall:
		if len(p.Arguments) == 0 || p.Arguments[0] != '{' {
			return nil, refuse(fmt.Sprintf("content[%d]: tool call arguments that are not an object", i))
		}
		return object{}.encode([]known{str("type", "tool_use"), str("id", p.ID), str("name", p.Name), raw("input", p.Arguments)}, p.Extra), nil
	case PartImage:
		var src []byte
		switch {
		case p.URL != "" && p.Data == "":
			src = object{}.encode([]known{str("type", "url"), str("url", p.URL)}, nil)
		case p.Data != "" && p.URL == "" && p.MIMEType != "":
			src = object{}.encode([]known{str("type", "base64"), str("media_type", p.MIMEType), str("data", p.Data)}, nil)
		default:
			return nil, refuse(fmt.Sprintf("content[%d]: an image needs a url, or data and a mimeType", i))
		}
		return object{}.encode([]known{str("type", "image"), {name: "source", enc: src}}, p.Extra), nil
	case PartToolResult:
		content, err := anthropicContent(p.Result, false, refuse, PartText, PartImage)
		if p.Result == nil {
			content, err = []byte("[]"), nil
		}
		if err != nil {
			return nil, err
		}
		return object{}.encode([]known{str("type", "tool_result"), str("tool_use_id", p.ID), {name: "content", enc: content},
			boolean("is_error", p.IsError)}, p.Extra), nil
	}
	return nil, refuse(fmt.Sprintf("content[%d]: a %s part", i, p.Type))
}
