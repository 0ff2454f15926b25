package codec

// The anthropic dialect: the messages array of Anthropic's Messages API. Its system prompt is a
// request-level field, not a message; a stored conversation carries it as a first message
// {"role":"system","content": string or text blocks}, allowed there only, so that the whole request
// state is one array. A user message holding only tool_result blocks counts as a ToolResult
// message; each tool_use (and server_tool_use) block is a tool call.

var anthropicBlocks = map[string][]string{
	"user":      {"text", "image", "document", "tool_result"},
	"assistant": {"text", "thinking", "redacted_thinking", "tool_use", "server_tool_use", "web_search_tool_result"},
	"system":    {"text"},
}

func checkAnthropic(c checker, m object, first bool, s *Stats) error {
	role, err := c.requireString(m, "", "role", false)
	if err != nil {
		return err
	}
	known, ok := anthropicBlocks[role]
	if !ok {
		return c.unknownRole(role, "user or assistant, or system as the first message")
	}
	if role == "system" && !first {
		return c.fail(ErrMalformed, "role", "a system message may only be the conversation's first (it stands for the request's system prompt)")
	}
	results := 0
	err = c.parts(m, "", "content", true, false, s, func(c checker, p object, field string, s *Stats) error {
		typ, err := c.partType(p, field, role, known...)
		if err != nil {
			return err
		}
		if typ == "tool_result" {
			results++
		}
		return anthropicBlock(c, p, typ, field, s)
	})
	if err != nil {
		return err
	}
	switch {
	case role == "system":
		s.System++
	case role == "assistant":
		s.Assistant++
	case results > 0 && kind(m.value("content")) == '[' && results == len(splitElements(m.value("content"))):
		s.ToolResult++ // a pure tool-result message
	default:
		s.User++
	}
	return nil
}

// anthropicBlock checks one content block of type typ.
func anthropicBlock(c checker, p object, typ, field string, s *Stats) error {
	at := field + "."
	if err := c.optional(p, at, "cache_control", '{'); err != nil {
		return err
	}
	switch typ {
	case "text":
		return c.all(c.strings(p, at, false, "text"), c.optional(p, at, "citations", '['))
	case "thinking":
		return c.all(c.strings(p, at, false, "thinking"), c.optional(p, at, "signature", '"'))
	case "redacted_thinking":
		return c.strings(p, at, false, "data")
	case "image", "document":
		return anthropicSource(c, p, at)
	case "tool_use", "server_tool_use":
		s.ToolCalls++
		if err := c.strings(p, at, true, "id", "name"); err != nil {
			return err
		}
		if in, ok := p.get("input"); !ok || kind(in) != '{' {
			return c.fail(ErrMalformed, at+"input", "want an object, found %s", describe(in))
		}
	case "web_search_tool_result":
		return c.strings(p, at, true, "tool_use_id")
	case "tool_result":
		if err := c.all(c.strings(p, at, true, "tool_use_id"), c.optional(p, at, "is_error", 't')); err != nil {
			return err
		}
		return c.parts(p, at, "content", true, true, s, func(c checker, q object, field string, s *Stats) error {
			typ, err := c.partType(q, field, "", "text", "image", "document", "search_result")
			if err != nil || typ == "search_result" {
				return err
			}
			return anthropicBlock(c, q, typ, field, s)
		})
	}
	return nil
}

// anthropicSource checks the source of an image or document block.
func anthropicSource(c checker, p object, at string) error {
	src, err := c.member(p, at, "source")
	if err != nil {
		return err
	}
	at += "source."
	typ, err := c.partType(src, at[:len(at)-1], "", "base64", "url", "file", "text", "content")
	if err != nil {
		return err
	}
	switch typ {
	case "base64", "text":
		return c.strings(src, at, true, "media_type", "data")
	case "url":
		return c.strings(src, at, true, "url")
	case "file":
		return c.strings(src, at, true, "file_id")
	}
	return nil
}

// anthropicImages finds the source URLs of image and document blocks (in tool results too) that
// name local files.
func anthropicImages(msg []byte) []imagePathSpan {
	var out []imagePathSpan
	var walk func(raw []byte, prefix string)
	walk = func(raw []byte, prefix string) {
		eachPart(raw, func(i int, p object) {
			field := prefix + "[" + itoa(i) + "]"
			if src, ok := p.get("source"); ok && kind(src) == '{' {
				if sp, ok := localSpan(msg, members(src).value("url"), field+".source.url"); ok {
					out = append(out, sp)
				}
			}
			if typeIs(p, "tool_result") {
				walk(p.value("content"), field+".content")
			}
		})
	}
	walk(members(msg).value("content"), "content")
	return out
}

// splitElements returns the elements of the array raw.
func splitElements(raw []byte) [][]byte {
	var out [][]byte
	_ = elements(raw, func(_ int, b []byte) error {
		out = append(out, b)
		return nil
	})
	return out
}
