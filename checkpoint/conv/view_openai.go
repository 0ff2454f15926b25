package conv

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Writing the model as openai-chat (a provider view, issue 13 item 3). The rule: carry everything
// or refuse. What openai-chat has a place for goes there; what the model knows but openai-chat has
// no field for (an assistant's model, provider, api, stopReason, errorMessage, usage, a message's
// timestamp, a tool result's toolName and isError) is carried as a member of the message under its
// native name, which openai-chat keeps unchecked and decodeOpenAIChat reads back; Extra members are
// carried as they are. What has no place at all is refused with a *CarryError naming it: thinking,
// extension messages (openai-chat has no such role), an image in anything but a user message, a
// tool call outside an assistant message, a part of a kind the model does not know. The stop
// reason is written as finish_reason, in OpenAI's words (stopreason.go).

// toOpenAIChat writes m as openai-chat messages (a message holding tool results becomes one tool
// message per result, after the rest).
func (m *Message) toOpenAIChat(index int) ([]json.RawMessage, error) {
	return m.writeSplit(index, false, (*Message).openAIChatOne)
}

func (m *Message) openAIChatOne(index int) ([]json.RawMessage, error) {
	refuse := refuser("openai-chat", index)
	var ks []known
	switch m.Role {
	case RoleSystem:
		role := "system"
		if m.sourceRole == "developer" {
			role = m.sourceRole
		}
		content, err := openAIContent(m.Content, m.contentString, refuse, PartText)
		if err != nil {
			return nil, err
		}
		ks = []known{str("role", role), {name: "content", enc: content}}
	case RoleUser:
		content, err := openAIContent(m.Content, m.contentString, refuse, PartText, PartImage)
		if err != nil {
			return nil, err
		}
		ks = []known{str("role", "user"), {name: "content", enc: content}}
	case RoleAssistant:
		return m.openAIAssistant(refuse)
	case RoleToolResult:
		content, err := openAIContent(m.Content, m.contentString, refuse, PartText)
		if err != nil {
			return nil, err
		}
		ks = []known{str("role", "tool"), str("tool_call_id", m.ToolCallID), {name: "content", enc: content}}
	case RoleExtension:
		if sys, ok := m.fromSystemPrompt(); ok {
			return sys.openAIChatOne(index)
		}
		return nil, refuse(fmt.Sprintf("extension message of kind %q (openai-chat has no place for it)", m.Kind))
	default:
		return nil, refuse(fmt.Sprintf("role %q", m.Role))
	}
	return m.openAIMessage(ks, refuse)
}

func (m *Message) openAIAssistant(refuse func(string) error) ([]json.RawMessage, error) {
	var text []Part
	var calls bytes.Buffer
	for i, p := range m.Content {
		switch p.Type {
		case PartText:
			text = append(text, p)
		case PartToolCall:
			if calls.Len() > 0 {
				calls.WriteByte(',')
			}
			fn := object{}.encode([]known{str("name", p.Name), {name: "arguments", enc: argumentsText(p.Arguments)}}, nil)
			calls.Write(object{}.encode([]known{str("id", p.ID), str("type", "function"), {name: "function", enc: fn}}, p.Extra))
		default:
			return nil, refuse(fmt.Sprintf("content[%d]: a %s part in an assistant message", i, p.Type))
		}
	}
	ks := []known{str("role", "assistant")}
	if len(text) > 0 || calls.Len() == 0 {
		content, err := openAIContent(text, m.contentString, refuse, PartText)
		if err != nil {
			return nil, err
		}
		ks = append(ks, known{name: "content", enc: content})
	}
	if calls.Len() > 0 {
		ks = append(ks, known{name: "tool_calls", enc: append(append([]byte{'['}, calls.Bytes()...), ']')})
	}
	if m.StopReason != "" {
		ks = append(ks, str("finish_reason", openAIChatStops.out(m.StopReason)))
	}
	return m.openAIMessage(ks, refuse)
}

// openAIMessage is an openai-chat message of members ks, then the native members openai-chat has
// no field for, then m's Extra.
func (m *Message) openAIMessage(ks []known, refuse func(string) error) ([]json.RawMessage, error) {
	ks = append(ks, m.carriedKnown(without(carriedFor(m.Role), "stopReason")...)...)
	b, err := withExtra(ks, m.Extra, refuse)
	if err != nil {
		return nil, err
	}
	return []json.RawMessage{b}, nil
}

// openAIContent writes parts as openai-chat content: a plain string when they came so and are one
// bare text, else an array of text (and, where allowed, image_url) parts.
func openAIContent(parts []Part, asString bool, refuse func(string) error, allowed ...PartType) ([]byte, error) {
	return viewContent("openai-chat", parts, asString, refuse, allowed, openAIPartOf)
}

// openAIPartOf writes one text or image part as openai-chat carries it.
func openAIPartOf(p Part, i int, refuse func(string) error) ([]byte, error) {
	if p.Type == PartText {
		return object{}.encode([]known{str("type", "text"), {name: "text", enc: encodeString(p.Text)}}, p.Extra), nil
	}
	url := p.URL
	if url == "" {
		if p.MIMEType == "" {
			return nil, refuse(fmt.Sprintf("content[%d]: inline image without a mimeType (a data: URL needs one)", i))
		}
		url = "data:" + p.MIMEType + ";base64," + p.Data
	} else if p.Data != "" {
		return nil, refuse(fmt.Sprintf("content[%d]: image with both data and url", i))
	}
	// detail belongs inside image_url (decodeOpenAIChat lifts it onto the part).
	var inner, outer []Field
	for _, f := range p.Extra {
		if f.Name == "detail" {
			inner = append(inner, f)
		} else {
			outer = append(outer, f)
		}
	}
	img := object{}.encode([]known{str("url", url)}, inner)
	return object{}.encode([]known{str("type", "image_url"), {name: "image_url", enc: img}}, outer), nil
}

// argumentsText is a tool call's arguments as openai-chat carries them: JSON text in a string (a
// string that came as the arguments, not JSON, is written as it came).
func argumentsText(args json.RawMessage) []byte {
	if len(args) > 0 && args[0] == '"' {
		return args
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	return encodeString(string(args))
}

func containsType(ts []PartType, t PartType) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// fromSystemPrompt reads a native extension of kind "system_prompt" as the system message it
// records: toNative writes {"role", "content"}; runtimes write the prompt as "content" (a string
// or text parts) or "text" (a string), with more members of their own (the tools offered, an
// agent's name), which the system message carries as members of its own, before the extension's.
func (m *Message) fromSystemPrompt() (*Message, bool) {
	if m.Role != RoleExtension || m.Kind != "system_prompt" || len(m.Data) == 0 || m.Data[0] != '{' {
		return nil, false
	}
	d := parseObject(m.Data)
	name := "content"
	content := d.raw("content")
	if content == nil {
		name, content = "text", d.raw("text")
		if !isString(content) {
			return nil, false
		}
	}
	parts, asString := decodeNativeContent(content)
	for _, p := range parts {
		if p.Type != PartText {
			return nil, false
		}
	}
	sys := &Message{Role: RoleSystem, Content: parts, contentString: asString, Timestamp: m.Timestamp}
	if role, ok := d.value("role"); ok && !takeString(d, "role", &sys.sourceRole) {
		sys.Extra = append(sys.Extra, Field{Name: "role", Value: role}) // not a string: carried as it is
	}
	sys.Extra = append(append(sys.Extra, d.extra("role", name)...), m.Extra...)
	return sys, true
}
