package conv

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Writing the model as swift-agent and agentsquad (views), by the rule of every view: carry
// everything or refuse. Both have only user and assistant messages and carry tool results inside
// user messages: a tool result is a user message holding one result (its toolName carried on the
// result), read back as a tool result; results nested in an assistant message are moved into
// messages of their own. swift-agent keeps an assistant's model and usage (inputTokens,
// outputTokens) itself; agentsquad a message's timestamp. What else the model knows is carried
// under its native name. Refused: system messages (neither has a system role), extension messages,
// thinking (neither has a place for it), tool calls outside assistant messages, images that the
// dialect cannot hold (agentsquad: only inline data of an image/* type), unknown part kinds.

func (m *Message) toSwift(index int) ([]json.RawMessage, error) {
	return m.writeSplit(index, true, (*Message).swiftOne)
}

func (m *Message) swiftOne(index int) ([]json.RawMessage, error) {
	refuse := refuser("swift-agent", index)
	var ks []known
	carried := carriedFor(m.Role)
	switch m.Role {
	case RoleUser:
		content, err := viewContent("swift-agent", m.Content, false, refuse, []PartType{PartText, PartImage, PartToolResult}, swiftItemOf)
		if err != nil {
			return nil, err
		}
		ks = []known{str("role", "user"), {name: "content", enc: content}}
	case RoleToolResult:
		content, err := viewContent("swift-agent", []Part{m.nestResult()}, false, refuse, []PartType{PartToolResult}, swiftItemOf)
		if err != nil {
			return nil, err
		}
		ks, carried = []known{str("role", "user"), {name: "content", enc: content}}, carriedOther
	case RoleAssistant:
		content, err := viewContent("swift-agent", m.Content, false, refuse, []PartType{PartText, PartToolCall}, swiftItemOf)
		if err != nil {
			return nil, err
		}
		ks = []known{str("role", "assistant"), {name: "content", enc: content}, str("model", m.Model)}
		if u := m.Usage; u != nil {
			ks = append(ks, known{name: "usage", enc: object{}.encode([]known{num("inputTokens", u.Input), num("outputTokens", u.Output),
				num("cacheRead", u.CacheRead), num("cacheWrite", u.CacheWrite), num("totalTokens", u.Total)}, u.Extra)})
		}
		carried = without(carried, "model", "usage")
	default:
		return nil, refuse(noRole("swift-agent", m))
	}
	b, err := withExtra(append(ks, m.carriedKnown(carried...)...), m.Extra, refuse)
	if err != nil {
		return nil, err
	}
	return []json.RawMessage{b}, nil
}

// noRole names a message of a role the agent dialects have not.
func noRole(dialect string, m *Message) string {
	if m.Role == RoleExtension {
		if _, ok := m.fromSystemPrompt(); !ok {
			return fmt.Sprintf("extension message of kind %q (%s has no place for it)", m.Kind, dialect)
		}
	}
	return fmt.Sprintf("a system prompt (%s has no system role)", dialect)
}

func swiftItemOf(p Part, i int, refuse func(string) error) ([]byte, error) {
	switch p.Type {
	case PartText:
		return object{}.encode([]known{str("type", "text"), {name: "text", enc: encodeString(p.Text)}}, p.Extra), nil
	case PartImage:
		return object{}.encode([]known{str("type", "image"), str("data", p.Data), str("fileURL", p.URL), str("mimeType", p.MIMEType)}, p.Extra), nil
	case PartToolCall:
		return object{}.encode([]known{str("type", "toolCall"), str("id", p.ID), str("name", p.Name), raw("arguments", p.Arguments)}, p.Extra), nil
	case PartToolResult:
		content, err := viewContent("swift-agent", orNoParts(p.Result), false, refuse, []PartType{PartText, PartImage}, swiftItemOf)
		if err != nil {
			return nil, err
		}
		isError := known{name: "isError", enc: []byte(fmt.Sprint(p.IsError))}
		return object{}.encode([]known{str("type", "toolResult"), str("toolCallId", p.ID), {name: "content", enc: content}, isError}, p.Extra), nil
	}
	return nil, refuse(fmt.Sprintf("content[%d]: a %s part", i, p.Type))
}

func (m *Message) toAgentSquad(index int) ([]json.RawMessage, error) {
	return m.writeSplit(index, true, (*Message).agentSquadOne)
}

func (m *Message) agentSquadOne(index int) ([]json.RawMessage, error) {
	refuse := refuser("agentsquad", index)
	var allowed []PartType
	parts, role, carried := m.Content, string(m.Role), carriedFor(m.Role)
	switch m.Role {
	case RoleUser:
		allowed = []PartType{PartText, PartImage, PartToolResult}
	case RoleToolResult:
		parts, role, allowed, carried = []Part{m.nestResult()}, "user", []PartType{PartToolResult}, carriedOther
	case RoleAssistant:
		allowed = []PartType{PartText, PartToolCall}
	default:
		return nil, refuse(noRole("agentsquad", m))
	}
	content, err := viewContent("agentsquad", parts, false, refuse, allowed, agentSquadBlockOf)
	if err != nil {
		return nil, err
	}
	ks := append([]known{str("role", role), {name: "content", enc: content}}, m.carriedKnown(carried...)...)
	b, err := withExtra(ks, m.Extra, refuse)
	if err != nil {
		return nil, err
	}
	return []json.RawMessage{b}, nil
}

// agentSquadBlockOf writes one part as an agentsquad (Bedrock Converse) block, named by its key.
func agentSquadBlockOf(p Part, i int, refuse func(string) error) ([]byte, error) {
	block := func(key string, v []byte) []byte { return object{}.encode([]known{{name: key, enc: v}}, nil) }
	switch p.Type {
	case PartText:
		return object{}.encode([]known{{name: "text", enc: encodeString(p.Text)}}, p.Extra), nil
	case PartImage:
		format, ok := strings.CutPrefix(p.MIMEType, "image/")
		if p.Data == "" || p.URL != "" || !ok || format == "" {
			return nil, refuse(fmt.Sprintf("content[%d]: an image agentsquad cannot hold (it needs inline data of an image/* type)", i))
		}
		src := object{}.encode([]known{str("bytes", p.Data)}, nil)
		return block("image", object{}.encode([]known{str("format", format), {name: "source", enc: src}}, p.Extra)), nil
	case PartToolCall:
		if len(p.Arguments) == 0 || p.Arguments[0] != '{' {
			return nil, refuse(fmt.Sprintf("content[%d]: tool call arguments that are not an object", i))
		}
		return block("toolUse", object{}.encode([]known{str("toolUseId", p.ID), str("name", p.Name), raw("input", p.Arguments)}, p.Extra)), nil
	case PartToolResult:
		content, err := viewContent("agentsquad", orNoParts(p.Result), false, refuse, nil, agentSquadResultBlock)
		if err != nil {
			return nil, err
		}
		status := "success"
		if p.IsError {
			status = "error"
		}
		return block("toolResult", object{}.encode([]known{str("toolUseId", p.ID), {name: "content", enc: content}, str("status", status)}, p.Extra)), nil
	}
	return nil, refuse(fmt.Sprintf("content[%d]: a %s part", i, p.Type))
}

// agentSquadResultBlock writes a part of a tool result: text, an image, or a block agentsquad
// decoded and the model has no type for (json, document), as it came.
func agentSquadResultBlock(p Part, i int, refuse func(string) error) ([]byte, error) {
	if len(p.Extra) == 1 && p.Extra[0].Name == "value" && p.Type != PartText && p.Type != PartImage {
		return object{}.encode([]known{{name: string(p.Type), enc: p.Extra[0].Value}}, nil), nil
	}
	return agentSquadBlockOf(p, i, refuse)
}

func orNoParts(parts []Part) []Part {
	if parts == nil {
		return []Part{}
	}
	return parts
}
