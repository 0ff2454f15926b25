package oldcodec

import "strings"

// The antigravity dialect: an agent's trajectory of steps, one step per array element, in order.
// No public schema of it exists; this follows the shape the issue describes (docs/format.md). A
// step's type says what it is: TextResponse (counted as User when its source is USER, else as
// Assistant), ToolCall (Assistant; each entry of tool_calls is a tool call), SystemMessage (System),
// Compaction (the compaction marker) and Finish (both Extension).

var antigravityTypes = []string{"TextResponse", "ToolCall", "SystemMessage", "Compaction", "Finish"}

func checkAntigravity(c checker, m object, _ bool, s *Stats) error {
	if err := c.strings(m, "", true, "id"); err != nil {
		return err
	}
	if raw, ok := m["step_index"]; !ok || kind(raw) != '0' || !isNonNegativeInteger(raw) {
		return c.fail(ErrMalformed, "step_index", "want a non-negative integer, found %s", describe(raw))
	}
	typ, err := c.partType(m, "", "", antigravityTypes...)
	if err != nil {
		return err
	}
	if err := c.optionals(m, "", '"', "source", "target", "status", "content", "thinking"); err != nil {
		return err
	}
	if err := antigravityUsage(c, m); err != nil {
		return err
	}
	if err := c.parts(m, "", "tool_calls", false, true, s, antigravityToolCall); err != nil {
		return err
	}
	switch typ {
	case "TextResponse":
		if raw, ok := m["source"]; ok && kind(raw) == '"' && strings.EqualFold(stringValue(raw), "USER") {
			s.User++
		} else {
			s.Assistant++
		}
	case "ToolCall":
		s.Assistant++
	case "SystemMessage":
		s.System++
	default: // Compaction, Finish
		s.Extension++
	}
	return nil
}

func antigravityToolCall(c checker, p object, field string, s *Stats) error {
	s.ToolCalls++
	at := field + "."
	return c.all(c.strings(p, at, true, "name"), c.optional(p, at, "id", '"'), c.optional(p, at, "args", '{'))
}

// antigravityUsage checks usage_metadata: an object whose token counts (members named *_count, as
// Gemini's prompt_token_count) are non-negative numbers.
func antigravityUsage(c checker, m object) error {
	raw, ok := m["usage_metadata"]
	if !ok || kind(raw) == 'n' {
		return nil
	}
	u, err := c.object(raw, "usage_metadata")
	if err != nil {
		return err
	}
	for name, v := range u {
		if strings.HasSuffix(name, "_count") && kind(v) != 'n' && (kind(v) != '0' || v[0] == '-') {
			return c.fail(ErrMalformed, "usage_metadata."+name, "want a non-negative number, found %s", describe(v))
		}
	}
	return nil
}

// isNonNegativeInteger reports whether the JSON number raw is written as a non-negative integer.
func isNonNegativeInteger(raw []byte) bool {
	for _, b := range raw {
		if b < '0' || b > '9' {
			return false
		}
	}
	return len(raw) > 0
}
