package conv

import (
	"bytes"
	"encoding/json"
)

// The members native knows, by role and by part type; every other member is Extra.
var (
	nativeMessageKnown = map[Role][]string{
		RoleUser:       {"role", "content", "timestamp"},
		RoleAssistant:  {"role", "content", "model", "provider", "api", "stopReason", "errorMessage", "usage", "timestamp"},
		RoleToolResult: {"role", "toolCallId", "toolName", "content", "isError", "timestamp"},
		RoleExtension:  {"role", "kind", "data", "timestamp"},
	}
	nativePartKnown = map[PartType][]string{
		PartText:     {"type", "text"},
		PartThinking: {"type", "thinking"},
		PartImage:    {"type", "data", "url", "mimeType"},
		PartToolCall: {"type", "id", "name", "arguments"},
	}
	usageCamel = []string{"input", "output", "cacheRead", "cacheWrite", "totalTokens"}
	usageSnake = []string{"input", "output", "cache_read", "cache_write", "total_tokens"}
)

// decodeNative maps one native message (canonical bytes, already validated) into the model.
func decodeNative(b json.RawMessage) Message {
	o := parseObject(b)
	m := Message{Role: Role(o.str("role")), orig: o}
	m.Timestamp = o.num("timestamp")
	switch m.Role {
	case RoleUser, RoleAssistant, RoleToolResult:
		m.Content, m.contentString = decodeNativeContent(o.raw("content"))
	}
	switch m.Role {
	case RoleAssistant:
		m.Model, m.Provider, m.API = o.str("model"), o.str("provider"), o.str("api")
		m.StopReason, m.ErrorMessage = o.str("stopReason"), o.str("errorMessage")
		if u := o.raw("usage"); u != nil && u[0] == '{' {
			m.Usage = decodeUsage(u)
		}
	case RoleToolResult:
		m.ToolCallID, m.ToolName, m.IsError = o.str("toolCallId"), o.str("toolName"), o.boolean("isError")
	case RoleExtension:
		m.Kind, m.Data = o.str("kind"), o.raw("data")
	}
	m.Extra = o.extra(nativeMessageKnown[m.Role]...)
	m.orig.remember(m.nativeKnown())
	return m
}

func decodeNativeContent(raw json.RawMessage) ([]Part, bool) {
	switch {
	case raw == nil:
		return nil, false
	case raw[0] == '"':
		var s string
		_ = json.Unmarshal(raw, &s)
		return []Part{Text(s)}, true
	}
	parts := []Part{}
	for _, e := range elements(raw) {
		parts = append(parts, decodeNativePart(e))
	}
	return parts, false
}

func decodeNativePart(b json.RawMessage) Part {
	o := parseObject(b)
	p := Part{Type: PartType(o.str("type")), orig: o}
	p.Text, p.Thinking = o.str("text"), o.str("thinking")
	p.Data, p.URL, p.MIMEType = o.str("data"), o.str("url"), o.str("mimeType")
	p.ID, p.Name, p.Arguments = o.str("id"), o.str("name"), o.raw("arguments")
	names, ok := nativePartKnown[p.Type]
	if !ok {
		names = []string{"type"}
	}
	// Members another part type knows are Extra here: clear what this type does not read.
	keep := p
	p = Part{Type: keep.Type, orig: o}
	for _, n := range names {
		switch n {
		case "text":
			p.Text = keep.Text
		case "thinking":
			p.Thinking = keep.Thinking
		case "data":
			p.Data = keep.Data
		case "url":
			p.URL = keep.URL
		case "mimeType":
			p.MIMEType = keep.MIMEType
		case "id":
			p.ID = keep.ID
		case "name":
			p.Name = keep.Name
		case "arguments":
			p.Arguments = keep.Arguments
		}
	}
	p.Extra = o.extra(names...)
	p.orig.remember(p.nativeKnown())
	return p
}

func decodeUsage(b json.RawMessage) *Usage {
	o := parseObject(b)
	u := &Usage{orig: o, Input: o.num("input"), Output: o.num("output")}
	_, u.snake = o.value("cache_read")
	if _, ok := o.value("total_tokens"); ok {
		u.snake = true
	}
	if u.snake {
		u.CacheRead, u.CacheWrite, u.Total = o.num("cache_read"), o.num("cache_write"), o.num("total_tokens")
		u.Extra = o.extra(usageSnake...)
	} else {
		u.CacheRead, u.CacheWrite, u.Total = o.num("cacheRead"), o.num("cacheWrite"), o.num("totalTokens")
		u.Extra = o.extra(usageCamel...)
	}
	u.orig.remember(u.known())
	return u
}

// nativeKnown is m's known members as native encodes them now.
func (m *Message) nativeKnown() []known {
	ks := []known{str("role", string(m.Role))}
	switch m.Role {
	case RoleUser:
		ks = append(ks, contentKnown("content", m.Content, m.contentString))
	case RoleAssistant:
		ks = append(ks, contentKnown("content", m.Content, false), // always an array in native
			str("model", m.Model), str("provider", m.Provider), str("api", m.API),
			str("stopReason", m.StopReason), str("errorMessage", m.ErrorMessage))
		if m.Usage != nil {
			ks = append(ks, known{name: "usage", enc: m.Usage.encode()})
		} else {
			ks = append(ks, known{name: "usage", enc: []byte("null"), omit: true})
		}
	case RoleToolResult:
		ks = append(ks, str("toolCallId", m.ToolCallID), str("toolName", m.ToolName),
			contentKnown("content", m.Content, m.contentString), boolean("isError", m.IsError))
	case RoleExtension:
		ks = append(ks, str("kind", m.Kind), raw("data", m.Data))
	}
	return append(ks, num("timestamp", m.Timestamp))
}

// contentKnown encodes parts: as a plain string when they came so and are still one bare text.
func contentKnown(name string, parts []Part, asString bool) known {
	if asString && len(parts) == 1 && parts[0].Type == PartText && len(parts[0].Extra) == 0 {
		return known{name: name, enc: encodeString(parts[0].Text)}
	}
	return known{name: name, enc: encodeParts(parts)}
}

func encodeParts(parts []Part) []byte {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i := range parts {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(parts[i].encodeNative())
	}
	buf.WriteByte(']')
	return buf.Bytes()
}

func (p *Part) nativeKnown() []known {
	ks := []known{str("type", string(p.Type))}
	switch p.Type {
	case PartText:
		ks = append(ks, known{name: "text", enc: encodeString(p.Text)})
	case PartThinking:
		ks = append(ks, known{name: "thinking", enc: encodeString(p.Thinking)})
	case PartImage:
		ks = append(ks, str("data", p.Data), str("url", p.URL), str("mimeType", p.MIMEType))
	case PartToolCall:
		ks = append(ks, str("id", p.ID), str("name", p.Name), raw("arguments", p.Arguments))
	}
	return ks
}

func (p *Part) encodeNative() []byte { return p.orig.encode(p.nativeKnown(), p.Extra) }

func (u *Usage) known() []known {
	names := usageCamel
	if u.snake {
		names = usageSnake
	}
	vals := []json.Number{u.Input, u.Output, u.CacheRead, u.CacheWrite, u.Total}
	ks := make([]known, len(names))
	for i, n := range names {
		ks[i] = num(n, vals[i])
	}
	return ks
}

func (u *Usage) encode() []byte { return u.orig.encode(u.known(), u.Extra) }

// encodeNativeMessage is m in native form.
func (m *Message) encodeNativeMessage() []byte { return m.orig.encode(m.nativeKnown(), m.Extra) }
