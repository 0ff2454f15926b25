package codec

// The openai-chat dialect: the messages array of OpenAI's Chat Completions API (and of the many
// servers that copy it). Roles system and developer count as System, tool as ToolResult; each
// entry of an assistant's tool_calls is a tool call.

func checkOpenAIChat(c checker, m object, _ bool, s *Stats) error {
	role, err := c.requireString(m, "", "role", false)
	if err != nil {
		return err
	}
	if err := c.optional(m, "", "name", '"'); err != nil {
		return err
	}
	switch role {
	case "system", "developer":
		s.System++
		return c.parts(m, "", "content", true, false, s, openAIPart(role, "text"))
	case "user":
		s.User++
		return c.parts(m, "", "content", true, false, s, openAIPart(role, "text", "image_url", "input_audio", "file"))
	case "assistant":
		s.Assistant++
		return openAIAssistant(c, m, s)
	case "tool":
		s.ToolResult++
		if err := c.checkString(m, "", "tool_call_id", true); err != nil {
			return err
		}
		return c.parts(m, "", "content", true, false, s, openAIPart(role, "text"))
	}
	return c.unknownRole(role, "system, developer, user, assistant or tool")
}

// openAIAssistant checks an assistant message: content may be absent or null when the message
// calls tools (or refuses, or answers in audio).
func openAIAssistant(c checker, m object, s *Stats) error {
	if err := c.optional(m, "", "refusal", '"'); err != nil {
		return err
	}
	if err := c.parts(m, "", "content", true, true, s, openAIPart("assistant", "text", "refusal")); err != nil {
		return err
	}
	if err := c.parts(m, "", "tool_calls", false, true, s, openAIToolCall); err != nil {
		return err
	}
	for _, f := range []string{"function_call", "audio"} { // function_call: the deprecated single call
		if err := c.optional(m, "", f, '{'); err != nil {
			return err
		}
	}
	if fc, ok := m.get("function_call"); ok && kind(fc) == '{' {
		s.ToolCalls++
		if err := c.strings(c.members(fc), "function_call.", false, "name", "arguments"); err != nil {
			return err
		}
	}
	for _, f := range []string{"content", "tool_calls", "function_call", "refusal", "audio"} {
		if present(m, f) {
			return nil
		}
	}
	return c.fail(ErrMalformed, "content", "missing (an assistant message needs content, tool_calls, refusal or audio)")
}

func openAIToolCall(c checker, p object, field string, s *Stats) error {
	s.ToolCalls++
	if _, err := c.partType(p, field, "", "function"); err != nil {
		return err
	}
	if err := c.checkString(p, field+".", "id", true); err != nil {
		return err
	}
	fn, err := c.member(p, field+".", "function")
	if err != nil {
		return err
	}
	if err := c.checkString(fn, field+".function.", "name", true); err != nil {
		return err
	}
	// The arguments are a JSON text in a string, as the model wrote it: kept, not parsed.
	err = c.checkString(fn, field+".function.", "arguments", false)
	return err
}

// openAIPart checks a content part of a message of role role, whose types may be those of known.
func openAIPart(role string, known ...string) partFunc {
	return func(c checker, p object, field string, _ *Stats) error {
		typ, err := c.partType(p, field, role, known...)
		if err != nil {
			return err
		}
		at := field + "."
		switch typ {
		case "text", "refusal":
			err = c.checkString(p, at, typ, false)
		case "image_url":
			var img object
			if img, err = c.member(p, at, "image_url"); err == nil {
				err = c.all(c.strings(img, at+"image_url.", true, "url"), c.optional(img, at+"image_url.", "detail", '"'))
			}
		case "input_audio":
			var a object
			if a, err = c.member(p, at, "input_audio"); err == nil {
				err = c.strings(a, at+"input_audio.", true, "data", "format")
			}
		case "file":
			var f object
			if f, err = c.member(p, at, "file"); err == nil {
				err = c.optionals(f, at+"file.", '"', "file_data", "file_id", "filename")
				if err == nil && !present(f, "file_data") && !present(f, "file_id") {
					err = c.fail(ErrMalformed, at+"file", "a file needs \"file_data\" or \"file_id\"")
				}
			}
		}
		return err
	}
}

// openAIChatImages finds content[i].image_url.url naming a local file.
func openAIChatImages(msg []byte) []imagePathSpan {
	var out []imagePathSpan
	eachPart(members(msg).value("content"), func(i int, p object) {
		if img, ok := p.get("image_url"); ok && kind(img) == '{' && typeIs(p, "image_url") {
			if sp, ok := localSpan(msg, members(img).value("url"), "content["+itoa(i)+"].image_url.url"); ok {
				out = append(out, sp)
			}
		}
	})
	return out
}

// eachPart calls fn for each object element of the array raw (nothing when raw is not an array).
func eachPart(raw []byte, fn func(i int, p object)) {
	if kind(raw) != '[' {
		return
	}
	_ = elements(raw, func(i int, b []byte) error {
		if kind(b) == '{' {
			fn(i, members(b))
		}
		return nil
	})
}

// typeIs reports whether part p has "type": typ.
func typeIs(p object, typ string) bool { return memberString(p, "type") == typ }
