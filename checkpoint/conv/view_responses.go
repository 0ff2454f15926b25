package conv

import (
	"encoding/json"
	"fmt"
)

// Writing the model as openai-responses (a provider view), by the rule of every view: carry
// everything or refuse. Responses input is a list of items, finer than messages: an assistant
// message becomes, in its order, a reasoning item for each run of thinking parts (their text as
// summary_text), a message item for each run of text parts (output_text) and a function_call item
// per tool call (arguments as JSON text); a tool result becomes a function_call_output. What the
// model knows and the items have no field for (model, provider, api, stopReason, errorMessage,
// usage, timestamp; a result's toolName and isError) is carried under its native name on the last
// item a message becomes, and read back by decodeResponses. Refused: extension messages (but a
// native system_prompt), images outside user content and tool results, unknown part kinds.

func (m *Message) toResponses(index int) ([]json.RawMessage, error) {
	return m.writeSplit(index, false, (*Message).responsesOne)
}

func (m *Message) responsesOne(index int) ([]json.RawMessage, error) {
	refuse := refuser("openai-responses", index)
	var ks []known
	switch m.Role {
	case RoleSystem:
		role := "system"
		if m.sourceRole == "developer" {
			role = m.sourceRole
		}
		content, err := responsesContent(m.Content, m.contentString, "input_text", refuse, PartText)
		if err != nil {
			return nil, err
		}
		ks = []known{str("role", role), {name: "content", enc: content}}
	case RoleUser:
		content, err := responsesContent(m.Content, m.contentString, "input_text", refuse, PartText, PartImage)
		if err != nil {
			return nil, err
		}
		ks = []known{str("role", "user"), {name: "content", enc: content}}
	case RoleToolResult:
		output, err := responsesContent(m.Content, m.contentString, "input_text", refuse, PartText, PartImage)
		if err != nil {
			return nil, err
		}
		ks = []known{str("type", "function_call_output"), str("call_id", m.ToolCallID), {name: "output", enc: output}}
	case RoleAssistant:
		return m.responsesAssistant(refuse)
	case RoleExtension:
		if sys, ok := m.fromSystemPrompt(); ok {
			return sys.responsesOne(index)
		}
		return nil, refuse(fmt.Sprintf("extension message of kind %q (openai-responses has no place for it)", m.Kind))
	default:
		return nil, refuse(fmt.Sprintf("role %q", m.Role))
	}
	b, err := withExtra(append(ks, m.carriedKnown(carriedFor(m.Role)...)...), m.Extra, refuse)
	if err != nil {
		return nil, err
	}
	return []json.RawMessage{b}, nil
}

// responsesAssistant writes an assistant message as items, in the order of its parts.
func (m *Message) responsesAssistant(refuse func(string) error) ([]json.RawMessage, error) {
	var items [][]known
	var extras [][]Field // each item's part members
	var run []Part       // the current run of text or thinking parts
	flush := func() {
		if len(run) == 0 {
			return
		}
		if run[0].Type == PartThinking {
			items = append(items, []known{str("type", "reasoning"), {name: "summary", enc: responsesSummary(run)}})
		} else {
			content, _ := responsesContent(run, false, "output_text", refuse, PartText) // only text parts: no refusal
			items = append(items, []known{str("role", "assistant"), {name: "content", enc: content}})
		}
		extras = append(extras, nil)
		run = nil
	}
	for i, p := range m.Content {
		switch p.Type {
		case PartText, PartThinking:
			if len(run) > 0 && run[0].Type != p.Type {
				flush()
			}
			run = append(run, p)
		case PartToolCall:
			flush()
			items = append(items, []known{str("type", "function_call"), str("call_id", p.ID), str("name", p.Name),
				{name: "arguments", enc: argumentsText(p.Arguments)}})
			extras = append(extras, p.Extra)
		default:
			return nil, refuse(fmt.Sprintf("content[%d]: a %s part in an assistant message", i, p.Type))
		}
	}
	flush()
	if len(items) == 0 { // no content: an empty assistant message
		items, extras = [][]known{{str("role", "assistant"), {name: "content", enc: []byte("[]")}}}, [][]Field{nil}
	}
	out := make([]json.RawMessage, len(items))
	for i, ks := range items {
		extra := extras[i]
		if i == len(items)-1 { // the message's own members go on its last item
			ks = append(ks, m.carriedKnown(carriedFor(m.Role)...)...)
			extra = append(append([]Field(nil), extra...), m.Extra...)
		}
		b, err := withExtra(ks, extra, refuse)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// responsesSummary is a run of thinking parts as a reasoning item's summary.
func responsesSummary(run []Part) []byte {
	var buf []byte
	buf = append(buf, '[')
	for i, p := range run {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, object{}.encode([]known{str("type", "summary_text"), {name: "text", enc: encodeString(p.Thinking)}}, p.Extra)...)
	}
	return append(buf, ']')
}

// responsesContent writes parts as a responses message's content (or a function output): a plain
// string when they came so and are one bare text, else input_text (output_text in an assistant
// message) and input_image parts.
func responsesContent(parts []Part, asString bool, textType string, refuse func(string) error, allowed ...PartType) ([]byte, error) {
	return viewContent("openai-responses", parts, asString, refuse, allowed, func(p Part, i int, refuse func(string) error) ([]byte, error) {
		if p.Type == PartText {
			return object{}.encode([]known{str("type", textType), {name: "text", enc: encodeString(p.Text)}}, p.Extra), nil
		}
		url := p.URL
		switch {
		case url == "" && p.MIMEType == "":
			return nil, refuse(fmt.Sprintf("content[%d]: inline image without a mimeType (a data: URL needs one)", i))
		case url == "":
			url = "data:" + p.MIMEType + ";base64," + p.Data
		case p.Data != "":
			return nil, refuse(fmt.Sprintf("content[%d]: image with both data and url", i))
		}
		return object{}.encode([]known{str("type", "input_image"), str("image_url", url)}, p.Extra), nil
	})
}
