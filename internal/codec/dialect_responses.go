package codec

// The openai-responses dialect: the input items of OpenAI's Responses API (what a stateless client
// resends every turn). An item is a message (with or without "type": "message"), a function_call,
// its function_call_output, or a reasoning item. Messages count by role (system and developer as
// System); function_call and reasoning items are the model's output and count as Assistant, a
// function_call also as a tool call; a function_call_output counts as ToolResult.

var responsesMessageParts = map[string][]string{
	"user":      {"input_text", "input_image", "input_file", "input_audio"},
	"system":    {"input_text"},
	"developer": {"input_text"},
	"assistant": {"output_text", "refusal", "input_text"},
}

func checkOpenAIResponses(c checker, m object, _ bool, s *Stats) error {
	typ := "message"
	if raw, ok := m["type"]; ok || !present(m, "role") {
		if kind(raw) != '"' {
			_, err := c.requireString(m, "", "type", true)
			return err
		}
		typ = stringValue(raw)
	}
	if err := c.optionals(m, "", '"', "id", "status"); err != nil {
		return err
	}
	switch typ {
	case "message":
		return responsesMessage(c, m, s)
	case "function_call":
		s.Assistant++
		s.ToolCalls++
		return c.all(c.strings(m, "", true, "call_id", "name"), c.strings(m, "", false, "arguments"))
	case "function_call_output":
		s.ToolResult++
		if err := c.strings(m, "", true, "call_id"); err != nil {
			return err
		}
		return c.parts(m, "", "output", true, false, s, responsesPart("", "input_text", "input_image", "input_file"))
	case "reasoning":
		s.Assistant++
		if err := c.optional(m, "", "encrypted_content", '"'); err != nil {
			return err
		}
		if err := c.parts(m, "", "summary", false, false, s, responsesPart("", "summary_text")); err != nil {
			return err
		}
		return c.parts(m, "", "content", false, true, s, responsesPart("", "reasoning_text"))
	}
	return c.fail(ErrUnknownContentType, "type", "%q (want message, function_call, function_call_output or reasoning)", typ)
}

func responsesMessage(c checker, m object, s *Stats) error {
	role, err := c.requireString(m, "", "role", false)
	if err != nil {
		return err
	}
	known, ok := responsesMessageParts[role]
	if !ok {
		return c.unknownRole(role, "user, assistant, system or developer")
	}
	switch role {
	case "user":
		s.User++
	case "assistant":
		s.Assistant++
	default:
		s.System++
	}
	return c.parts(m, "", "content", true, false, s, responsesPart(role, known...))
}

func responsesPart(role string, known ...string) partFunc {
	return func(c checker, p object, field string, _ *Stats) error {
		typ, err := c.partType(p, field, role, known...)
		if err != nil {
			return err
		}
		at := field + "."
		switch typ {
		case "input_text", "output_text", "summary_text", "reasoning_text":
			return c.all(c.strings(p, at, false, "text"), c.optional(p, at, "annotations", '['))
		case "refusal":
			return c.strings(p, at, false, "refusal")
		case "input_image":
			if !present(p, "image_url") && !present(p, "file_id") {
				return c.fail(ErrMalformed, field, "an input_image needs \"image_url\" or \"file_id\"")
			}
			return c.optionals(p, at, '"', "image_url", "file_id", "detail")
		case "input_file":
			if !present(p, "file_data") && !present(p, "file_id") && !present(p, "file_url") {
				return c.fail(ErrMalformed, field, "an input_file needs \"file_data\", \"file_id\" or \"file_url\"")
			}
			return c.optionals(p, at, '"', "file_data", "file_id", "file_url", "filename")
		case "input_audio":
			a, err := c.member(p, at, "input_audio")
			if err != nil {
				return err
			}
			return c.strings(a, at+"input_audio.", true, "data", "format")
		}
		return nil
	}
}

// responsesImages finds image_url of input_image parts and file_url of input_file parts naming
// local files, in messages' content and function outputs.
func responsesImages(msg []byte) []imagePathSpan {
	var out []imagePathSpan
	m := members(msg)
	for _, name := range []string{"content", "output"} {
		eachPart(m[name], func(i int, p object) {
			for typ, member := range map[string]string{"input_image": "image_url", "input_file": "file_url"} {
				if typeIs(p, typ) {
					if sp, ok := localSpan(msg, p[member], name+"["+itoa(i)+"]."+member); ok {
						out = append(out, sp)
					}
				}
			}
		})
	}
	return out
}
