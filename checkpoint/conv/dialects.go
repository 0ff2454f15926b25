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
			return dataURL(p)
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
		if takeString(o, "finish_reason", &m.StopReason) {
			m.StopReason = openAIChatStops.in(m.StopReason)
			names = append(names, "finish_reason")
		}
	}
	// What the model knows and openai-chat has no field for, carried by toOpenAIChat.
	names = append(names, readCarried(o, &m, without(carriedFor(m.Role), "stopReason")...)...)
	m.Extra = o.extra(names...)
	return m
}

// dataURL reads an image named by a data: URL as inline data and its MIME type.
func dataURL(p Part) Part {
	if rest, ok := strings.CutPrefix(p.URL, "data:"); ok {
		if mime, data, ok := strings.Cut(rest, ";base64,"); ok && mime != "" {
			p.URL, p.Data, p.MIMEType = "", data, mime
		}
	}
	return p
}

// takeString reads member name of o into dst when it is a string, and says whether it was.
func takeString(o object, name string, dst *string) bool {
	v, ok := o.value(name)
	if !ok || !isString(v) {
		return false
	}
	_ = json.Unmarshal(v, dst)
	return true
}

func without(names []string, drop ...string) []string {
	var out []string
	for _, n := range names {
		if !contains(drop, n) {
			out = append(out, n)
		}
	}
	return out
}

// --- anthropic ---

func decodeAnthropic(b json.RawMessage, _ bool) Message {
	o := parseObject(b)
	m := Message{Role: Role(o.str("role"))}
	m.Content = textContent(o.raw("content"), anthropicBlock)
	m.contentString = isString(o.raw("content"))
	names := []string{"role", "content"}
	if m.Role == RoleSystem && takeString(o, "sourceRole", &m.sourceRole) {
		names = append(names, "sourceRole") // openai's developer, carried by toAnthropic
	}
	if m.Role == RoleAssistant {
		if takeString(o, "model", &m.Model) {
			names = append(names, "model")
		}
		if takeString(o, "stop_reason", &m.StopReason) {
			m.StopReason = anthropicStops.in(m.StopReason)
			names = append(names, "stop_reason")
		}
		if u := o.raw("usage"); u != nil && u[0] == '{' {
			uo := parseObject(u)
			m.Usage = &Usage{Input: uo.num("input_tokens"), Output: uo.num("output_tokens"),
				CacheRead: uo.num("cache_read_input_tokens"), CacheWrite: uo.num("cache_creation_input_tokens"),
				Total: uo.num("totalTokens"), // carried by toAnthropic: anthropic has no total
				Extra: uo.extra("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "totalTokens")}
			names = append(names, "usage")
		}
	}
	// What toAnthropic carries under native names.
	names = append(names, readCarried(o, &m, without(carriedFor(m.Role), "model", "stopReason", "usage")...)...)
	m.Extra = o.extra(names...)
	// A user message holding one tool result is a tool result (as toAnthropic writes one).
	return unnestResult(m)
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
			return dataURL(Part{Type: PartImage, URL: o.str("image_url"), Extra: o.extra("type", "image_url")})
		}
		return unknownPart(o.str("type"), o)
	}
	var m Message
	var names []string
	switch o.str("type") {
	case "function_call":
		p := ToolCall(o.str("call_id"), o.str("name"), arguments(o.raw("arguments")))
		m, names = Message{Role: RoleAssistant, Content: []Part{p}}, []string{"type", "call_id", "name", "arguments"}
	case "function_call_output":
		m = Message{Role: RoleToolResult, ToolCallID: o.str("call_id"), Content: textContent(o.raw("output"), part)}
		m.contentString = isString(o.raw("output"))
		names = []string{"type", "call_id", "output"}
	case "reasoning":
		parts := []Part{}
		for _, e := range elements(o.raw("summary")) {
			s := parseObject(e)
			parts = append(parts, Part{Type: PartThinking, Thinking: s.str("text"), Extra: s.extra("type", "text")})
		}
		m, names = Message{Role: RoleAssistant, Content: parts}, []string{"type", "summary"}
		if c, ok := o.value("content"); ok && string(c) == "null" {
			names = append(names, "content") // no reasoning text: as if absent
		}
	default:
		m = Message{Role: Role(o.str("role")), Content: textContent(o.raw("content"), part)}
		m.contentString = isString(o.raw("content"))
		names = []string{"role", "content"}
		if o.str("type") == "message" {
			names = append(names, "type") // the default: a message item may say it or not
		}
		if r := o.str("role"); r == "developer" || r == "system" {
			m.Role, m.sourceRole = RoleSystem, r
		}
	}
	// What toResponses carries under native names.
	names = append(names, readCarried(o, &m, carriedFor(m.Role)...)...)
	m.Extra = o.extra(names...)
	return m
}

// --- swift-agent ---

func decodeSwift(b json.RawMessage, _ bool) Message {
	o := parseObject(b)
	m := Message{Role: Role(o.str("role")), Content: textContent(o.raw("content"), swiftItem)}
	names := []string{"role", "content"}
	if m.Role == RoleAssistant {
		if takeString(o, "model", &m.Model) {
			names = append(names, "model")
		}
		if u := o.raw("usage"); u != nil && u[0] == '{' {
			m.Usage, names = decodeSwiftUsage(u), append(names, "usage")
		}
	}
	names = append(names, readCarried(o, &m, without(carriedFor(m.Role), "model", "usage")...)...)
	m.Extra = o.extra(names...)
	return unnestResult(m)
}

// decodeSwiftUsage reads swift-agent's usage: inputTokens and outputTokens (and the counts a view
// carries under native names).
func decodeSwiftUsage(u json.RawMessage) *Usage {
	uo := parseObject(u)
	return &Usage{Input: uo.num("inputTokens"), Output: uo.num("outputTokens"), CacheRead: uo.num("cacheRead"),
		CacheWrite: uo.num("cacheWrite"), Total: uo.num("totalTokens"),
		Extra: uo.extra("inputTokens", "outputTokens", "cacheRead", "cacheWrite", "totalTokens")}
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
	m := Message{Role: Role(o.str("role")), Content: textContent(o.raw("content"), agentSquadBlock)}
	names := append([]string{"role", "content"}, readCarried(o, &m, carriedFor(m.Role)...)...)
	m.Extra = o.extra(names...)
	return unnestResult(m)
}

func agentSquadBlock(o object) Part {
	if v, ok := o.value("text"); ok && isString(v) {
		var s string
		_ = json.Unmarshal(v, &s)
		return Part{Type: PartText, Text: s, Extra: o.extra("text")}
	}
	if v := o.raw("toolUse"); v != nil && len(o.members) == 1 {
		u := parseObject(v)
		return Part{Type: PartToolCall, ID: u.str("toolUseId"), Name: u.str("name"), Arguments: u.raw("input"),
			Extra: u.extra("toolUseId", "name", "input")}
	}
	if v := o.raw("toolResult"); v != nil && len(o.members) == 1 {
		r := parseObject(v)
		p := Part{Type: PartToolResult, ID: r.str("toolUseId"), IsError: r.str("status") == "error",
			Result: textContent(r.raw("content"), agentSquadBlock), Extra: r.extra("toolUseId", "content")}
		if s := r.str("status"); s == "error" || s == "success" {
			p.Extra = r.extra("toolUseId", "content", "status") // status is IsError
		}
		return p
	}
	if v := o.raw("image"); v != nil && len(o.members) == 1 {
		img := parseObject(v)
		src := parseObject(orObject(img.raw("source")))
		if f, data := img.str("format"), src.str("bytes"); f != "" && data != "" && len(src.members) == 1 {
			return Part{Type: PartImage, Data: data, MIMEType: "image/" + f, Extra: img.extra("format", "source")}
		}
	}
	// Blocks without a type (json, image, document): the part's type is the block's one key.
	if len(o.members) == 1 {
		return Part{Type: PartType(o.members[0].key), Extra: []Field{{Name: "value", Value: o.members[0].raw}}}
	}
	return Part{Type: "block", Extra: o.extra()}
}

func orObject(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || raw[0] != '{' {
		return json.RawMessage("{}")
	}
	return raw
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
	// A step's tool results, when each is {id, output: a string, ...}: results nested in the step.
	if results, ok := antigravityResults(o.raw("tool_results")); ok {
		parts = append(parts, results...)
		names = append(names, "tool_results")
	}
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
	m.contentString = len(parts) == 1 && parts[0].Type == PartText // antigravity's content is a string
	if o.str("type") == antigravityType(&m) {
		names = append(names, "type") // what the step is follows from the message: not carried
	}
	if u := o.raw("usage_metadata"); u != nil && u[0] == '{' && m.Role != RoleExtension {
		uo := parseObject(u)
		m.Usage = &Usage{Input: uo.num("prompt_token_count"), Output: uo.num("candidates_token_count"),
			CacheRead: uo.num("cached_content_token_count"), Total: uo.num("total_token_count"),
			Extra: uo.extra("prompt_token_count", "candidates_token_count", "cached_content_token_count", "total_token_count")}
	}
	m.Extra = o.extra(names...)
	return m
}

// antigravityType is the step type a message of the model is, when not an extension.
func antigravityType(m *Message) string {
	switch {
	case m.Role == RoleSystem:
		return "SystemMessage"
	case m.Role == RoleAssistant && len(m.ToolCalls()) > 0:
		return "ToolCall"
	case m.Role == RoleUser, m.Role == RoleAssistant:
		return "TextResponse"
	}
	return ""
}

// antigravityResults reads a step's tool_results as nested tool results, when every entry is an
// object with a string id and a string output; otherwise they stay in the step's Extra.
func antigravityResults(raw json.RawMessage) ([]Part, bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	var parts []Part
	for _, e := range elements(raw) {
		if e[0] != '{' {
			return nil, false
		}
		r := parseObject(e)
		id, out := r.raw("id"), r.raw("output")
		if !isString(id) || !isString(out) {
			return nil, false
		}
		parts = append(parts, Part{Type: PartToolResult, ID: r.str("id"), Result: []Part{Text(r.str("output"))},
			Extra: r.extra("id", "output")})
	}
	return parts, true
}

func onlyOneResult(parts []Part) bool { return len(parts) == 1 && parts[0].Type == PartToolResult }

func isString(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '"' }

func orEmpty(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return json.RawMessage("[]")
	}
	return raw
}
