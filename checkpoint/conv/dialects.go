package conv

import (
	"encoding/json"
	"strings"
)

// A decoder maps one message of a dialect (canonical bytes, already validated by internal/codec)
// into the model; first says it is the conversation's first message. What the model has no field
// for stays in Extra (of the message or of the part), verbatim: a part the model does not know
// keeps its dialect's type as Type and all its other members in Extra.
type decoder func(b json.RawMessage, first bool) Message

var decoders = map[string]decoder{
	"native":           func(b json.RawMessage, _ bool) Message { return decodeNative(b) },
	"openai-chat":      decodeOpenAIChat,
	"anthropic":        decodeAnthropic,
	"openai-responses": decodeResponses,
	"swift-agent":      decodeSwift,
	"agentsquad":       decodeAgentSquad,
	"antigravity":      decodeAntigravity,
}

// unknownPart keeps a part the model does not know: its type and every other member.
func unknownPart(typ string, o object) Part {
	return Part{Type: PartType(typ), Extra: o.extra("type")}
}

// textContent maps a string or an array of parts, each mapped by fn.
func textContent(raw json.RawMessage, fn func(o object) Part) []Part {
	if raw == nil {
		return nil
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return []Part{Text(s)}
	}
	parts := []Part{}
	for _, e := range elements(raw) {
		parts = append(parts, fn(parseObject(e)))
	}
	return parts
}

// textPart maps a part carrying its text in member name under any of types.
func textPart(o object, name string, types ...string) (Part, bool) {
	typ := o.str("type")
	for _, t := range types {
		if typ == t {
			return Part{Type: PartText, Text: o.str(name), Extra: o.extra("type", name)}, true
		}
	}
	return Part{}, false
}

// arguments reads a tool call's arguments given as JSON text in a string: the JSON value it holds,
// or, when it holds none, the string itself (native then refuses it as not an object).
func arguments(raw json.RawMessage) json.RawMessage {
	if raw == nil || raw[0] != '"' {
		return raw
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	if json.Valid([]byte(s)) {
		return json.RawMessage(compactJSON(s))
	}
	return raw
}

func compactJSON(s string) []byte {
	if c, err := compactBytes([]byte(s)); err == nil {
		return c
	}
	return []byte(s)
}

// --- openai-chat ---

func decodeOpenAIChat(b json.RawMessage, _ bool) Message {
	o := parseObject(b)
	role := o.str("role")
	m := Message{}
	part := func(o object) Part {
		if p, ok := textPart(o, "text", "text"); ok {
			return p
		}
		if o.str("type") == "image_url" {
			img := parseObject(o.raw("image_url"))
			p := Part{Type: PartImage, URL: img.str("url"), Extra: append(o.extra("type", "image_url"), img.extra("url")...)}
			// A data: URL is an inline image: its data and MIME type, as toOpenAIChat writes them.
			if rest, ok := strings.CutPrefix(p.URL, "data:"); ok {
				if mime, data, ok := strings.Cut(rest, ";base64,"); ok && mime != "" {
					p.URL, p.Data, p.MIMEType = "", data, mime
				}
			}
			return p
		}
		return unknownPart(o.str("type"), o)
	}
	switch role {
	case "system", "developer":
		m.Role, m.sourceRole = RoleSystem, role
	case "tool":
		m.Role, m.ToolCallID = RoleToolResult, o.str("tool_call_id")
	default:
		m.Role = Role(role)
	}
	m.Content = textContent(o.raw("content"), part)
	m.contentString = isString(o.raw("content"))
	names := []string{"role", "content", "tool_call_id"}
	// What the model knows and openai-chat has no field for, carried under its native name by
	// toOpenAIChat; read back here.
	m.Model, m.Provider, m.API = o.str("model"), o.str("provider"), o.str("api")
	m.StopReason, m.ErrorMessage, m.Timestamp = o.str("stopReason"), o.str("errorMessage"), o.num("timestamp")
	m.ToolName, m.IsError = o.str("toolName"), o.boolean("isError")
	if u := o.raw("usage"); u != nil && u[0] == '{' {
		m.Usage = decodeUsage(u)
	}
	names = append(names, carriedOpenAIChat...)
	if m.Role == RoleAssistant {
		if m.Content == nil {
			m.Content = []Part{}
		}
		if tc := o.raw("tool_calls"); tc != nil {
			for _, e := range elements(tc) {
				call := parseObject(e)
				fn := parseObject(call.raw("function"))
				p := ToolCall(call.str("id"), fn.str("name"), arguments(fn.raw("arguments")))
				p.Extra = append(call.extra("id", "function", "type"), fn.extra("name", "arguments")...)
				m.Content = append(m.Content, p)
			}
		}
		names = append(names, "tool_calls")
	}
	m.Extra = o.extra(names...)
	return m
}

// --- anthropic ---

func decodeAnthropic(b json.RawMessage, _ bool) Message {
	o := parseObject(b)
	m := Message{Role: Role(o.str("role")), Model: o.str("model"), StopReason: o.str("stop_reason")}
	m.Content = textContent(o.raw("content"), anthropicBlock)
	m.contentString = isString(o.raw("content"))
	if u := o.raw("usage"); u != nil && u[0] == '{' {
		uo := parseObject(u)
		m.Usage = &Usage{Input: uo.num("input_tokens"), Output: uo.num("output_tokens"),
			CacheRead: uo.num("cache_read_input_tokens"), CacheWrite: uo.num("cache_creation_input_tokens"),
			Total: uo.num("totalTokens"), // carried by toAnthropic: anthropic has no total
			Extra: uo.extra("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "totalTokens")}
	}
	// What toAnthropic carries under native names.
	m.Provider, m.API, m.ErrorMessage, m.Timestamp = o.str("provider"), o.str("api"), o.str("errorMessage"), o.num("timestamp")
	names := append([]string{"role", "content", "model", "stop_reason", "usage"}, carriedAnthropic...)
	m.Extra = o.extra(names...)
	if m.Role == RoleUser && onlyOneResult(m.Content) {
		// A user message holding one tool result is a tool result (as toAnthropic writes one).
		r := m.Content[0]
		tr := Message{Role: RoleToolResult, ToolCallID: r.ID, IsError: r.IsError, Content: r.Result, Timestamp: m.Timestamp, Extra: m.Extra}
		for _, f := range r.Extra {
			if f.Name == "toolName" && isString(f.Value) {
				_ = json.Unmarshal(f.Value, &tr.ToolName)
			} else {
				tr.Extra = append(tr.Extra, f)
			}
		}
		return tr
	}
	return m
}

func anthropicBlock(o object) Part {
	if p, ok := textPart(o, "text", "text"); ok {
		return p
	}
	switch o.str("type") {
	case "thinking":
		return Part{Type: PartThinking, Thinking: o.str("thinking"), Extra: o.extra("type", "thinking")}
	case "tool_use":
		return Part{Type: PartToolCall, ID: o.str("id"), Name: o.str("name"), Arguments: o.raw("input"),
			Extra: o.extra("type", "id", "name", "input")}
	case "tool_result":
		return Part{Type: PartToolResult, ID: o.str("tool_use_id"), IsError: o.boolean("is_error"),
			Result: textContent(o.raw("content"), anthropicBlock), Extra: o.extra("type", "tool_use_id", "is_error", "content")}
	case "image":
		src := parseObject(o.raw("source"))
		switch src.str("type") {
		case "base64":
			return Part{Type: PartImage, Data: src.str("data"), MIMEType: src.str("media_type"),
				Extra: append(o.extra("type", "source"), src.extra("type", "data", "media_type")...)}
		case "url":
			return Part{Type: PartImage, URL: src.str("url"), Extra: append(o.extra("type", "source"), src.extra("type", "url")...)}
		}
	}
	return unknownPart(o.str("type"), o)
}

// --- openai-responses ---

func decodeResponses(b json.RawMessage, _ bool) Message {
	o := parseObject(b)
	part := func(o object) Part {
		if p, ok := textPart(o, "text", "input_text", "output_text"); ok {
			return p
		}
		if o.str("type") == "input_image" && o.str("image_url") != "" {
			return Part{Type: PartImage, URL: o.str("image_url"), Extra: o.extra("type", "image_url")}
		}
		return unknownPart(o.str("type"), o)
	}
	switch o.str("type") {
	case "function_call":
		p := ToolCall(o.str("call_id"), o.str("name"), arguments(o.raw("arguments")))
		return Message{Role: RoleAssistant, Content: []Part{p}, Extra: o.extra("call_id", "name", "arguments")}
	case "function_call_output":
		return Message{Role: RoleToolResult, ToolCallID: o.str("call_id"), Content: textContent(o.raw("output"), part),
			Extra: o.extra("call_id", "output")}
	case "reasoning":
		var parts []Part
		for _, e := range elements(o.raw("summary")) {
			s := parseObject(e)
			parts = append(parts, Part{Type: PartThinking, Thinking: s.str("text"), Extra: s.extra("type", "text")})
		}
		return Message{Role: RoleAssistant, Content: parts, Extra: o.extra("summary")}
	}
	m := Message{Role: Role(o.str("role")), Content: textContent(o.raw("content"), part), Extra: o.extra("role", "content")}
	if r := o.str("role"); r == "developer" || r == "system" {
		m.Role, m.sourceRole = RoleSystem, r
	}
	return m
}

// --- swift-agent ---

func decodeSwift(b json.RawMessage, _ bool) Message {
	o := parseObject(b)
	m := Message{Role: Role(o.str("role")), Content: textContent(o.raw("content"), swiftItem), Extra: o.extra("role", "content")}
	return m
}

func swiftItem(o object) Part {
	if p, ok := textPart(o, "text", "text"); ok {
		return p
	}
	switch o.str("type") {
	case "image":
		return Part{Type: PartImage, Data: o.str("data"), URL: o.str("fileURL"), MIMEType: o.str("mimeType"),
			Extra: o.extra("type", "data", "fileURL", "mimeType")}
	case "toolCall":
		return Part{Type: PartToolCall, ID: o.str("id"), Name: o.str("name"), Arguments: arguments(o.raw("arguments")),
			Extra: o.extra("type", "id", "name", "arguments")}
	case "toolResult":
		return Part{Type: PartToolResult, ID: o.str("toolCallId"), IsError: o.boolean("isError"),
			Result: textContent(o.raw("content"), swiftItem), Extra: o.extra("type", "toolCallId", "isError", "content")}
	}
	return unknownPart(o.str("type"), o)
}

// --- agentsquad ---

func decodeAgentSquad(b json.RawMessage, _ bool) Message {
	o := parseObject(b)
	return Message{Role: Role(o.str("role")), Content: textContent(o.raw("content"), agentSquadBlock),
		Timestamp: o.num("timestamp"), Extra: o.extra("role", "content", "timestamp")}
}

func agentSquadBlock(o object) Part {
	if v, ok := o.value("text"); ok && len(o.members) == 1 {
		var s string
		_ = json.Unmarshal(v, &s)
		return Text(s)
	}
	if v := o.raw("toolUse"); v != nil && len(o.members) == 1 {
		u := parseObject(v)
		return Part{Type: PartToolCall, ID: u.str("toolUseId"), Name: u.str("name"), Arguments: u.raw("input"),
			Extra: u.extra("toolUseId", "name", "input")}
	}
	if v := o.raw("toolResult"); v != nil && len(o.members) == 1 {
		r := parseObject(v)
		return Part{Type: PartToolResult, ID: r.str("toolUseId"), IsError: r.str("status") == "error",
			Result: textContent(r.raw("content"), agentSquadBlock), Extra: r.extra("toolUseId", "content")}
	}
	// Blocks without a type (json, image, document): the part's type is the block's one key.
	if len(o.members) == 1 {
		return Part{Type: PartType(o.members[0].key), Extra: []Field{{Name: "value", Value: o.members[0].raw}}}
	}
	return Part{Type: "block", Extra: o.extra()}
}

// --- antigravity ---

func decodeAntigravity(b json.RawMessage, _ bool) Message {
	o := parseObject(b)
	m := Message{}
	var parts []Part
	if t := o.str("thinking"); t != "" {
		parts = append(parts, Thinking(t))
	}
	if c := o.str("content"); c != "" {
		parts = append(parts, Text(c))
	}
	for _, e := range elements(orEmpty(o.raw("tool_calls"))) {
		c := parseObject(e)
		parts = append(parts, Part{Type: PartToolCall, ID: c.str("id"), Name: c.str("name"), Arguments: c.raw("args"),
			Extra: c.extra("id", "name", "args")})
	}
	names := []string{"thinking", "content", "tool_calls", "usage_metadata"}
	switch o.str("type") {
	case "SystemMessage":
		m.Role = RoleSystem
	case "TextResponse":
		m.Role = RoleAssistant
		if o.str("source") == "USER" {
			m.Role = RoleUser
		}
	case "ToolCall":
		m.Role = RoleAssistant
	case "Compaction":
		m.Role, m.Kind = RoleExtension, KindCompaction
		m.Data = append(append([]byte(`{"summary":`), encodeString(o.str("content"))...), '}')
		parts = nil
		names = []string{"content"}
	default: // Finish
		m.Role, m.Kind = RoleExtension, strings.ToLower(o.str("type"))
		parts = nil
		names = nil
	}
	if m.Role != RoleExtension && parts == nil {
		parts = []Part{}
	}
	m.Content = parts
	if u := o.raw("usage_metadata"); u != nil && u[0] == '{' {
		uo := parseObject(u)
		m.Usage = &Usage{Input: uo.num("prompt_token_count"), Output: uo.num("candidates_token_count"),
			CacheRead: uo.num("cached_content_token_count"), Total: uo.num("total_token_count"),
			Extra: uo.extra("prompt_token_count", "candidates_token_count", "cached_content_token_count", "total_token_count")}
	}
	m.Extra = o.extra(names...)
	return m
}

func onlyOneResult(parts []Part) bool { return len(parts) == 1 && parts[0].Type == PartToolResult }

func isString(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '"' }

func orEmpty(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return json.RawMessage("[]")
	}
	return raw
}
