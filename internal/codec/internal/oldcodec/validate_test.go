package oldcodec

import (
	"encoding/json"
	"fmt"
)

// Roles and content types of format 1. Anything else is refused, never guessed at.
const (
	RoleUser       = "user"
	RoleAssistant  = "assistant"
	RoleToolResult = "toolResult"
	RoleExtension  = "extension"
)

// usageTokenFields are checked in either spelling; other usage fields (cost, ...) are kept unchecked.
var usageTokenFields = []string{"input", "output", "cacheRead", "cacheWrite", "totalTokens", "cache_read", "cache_write", "total_tokens"}

// object is one JSON object's members, by exact key (encoding/json would match struct fields
// case-insensitively, and "Role" is not "role").
type object map[string]json.RawMessage

// checker validates one message and names the message index in every error.
type checker struct{ index int }

func (c checker) fail(err error, field, format string, args ...any) *ValidationError {
	return &ValidationError{Err: err, Index: c.index, Field: field, Offset: -1, Detail: fmt.Sprintf(format, args...)}
}

func (c checker) object(raw json.RawMessage, field string) (object, error) {
	if kind(raw) != '{' {
		return nil, c.fail(ErrMalformed, field, "want an object, found %s", describe(raw))
	}
	return members(raw), nil
}

// add validates one canonical message in dialect d and counts it.
func (s *Stats) add(d dialect, index int, first bool, msg json.RawMessage) error {
	c := checker{index}
	m, err := c.object(msg, "")
	if err != nil {
		return err
	}
	if err := d.check(c, m, first, s); err != nil {
		return err
	}
	s.Messages++
	return nil
}

// checkNative validates one message of the native format. Optional fields may be null (serde and
// Pydantic write absent options so): null is accepted and kept, never taken for a value.
func checkNative(c checker, m object, _ bool, s *Stats) error {
	role, err := c.requireString(m, "", "role", false)
	if err != nil {
		return err
	}
	if err := c.optional(m, "", "timestamp", '0'); err != nil {
		return err
	}
	switch role {
	case RoleUser:
		s.User++
		return c.content(m, true, s)
	case RoleAssistant:
		s.Assistant++
		return c.assistant(m, s)
	case RoleToolResult:
		s.ToolResult++
		if err = c.checkString(m, "", "toolCallId", true); err != nil {
			return err
		}
		return c.all(c.optional(m, "", "toolName", '"'), c.optional(m, "", "isError", 't'), c.content(m, true, s))
	case RoleExtension:
		s.Extension++
		err = c.checkString(m, "", "kind", true)
		return err
	}
	return c.fail(ErrUnknownRole, "role", "%q (want user, assistant, toolResult or extension)", role)
}

func (c checker) assistant(m object, s *Stats) error {
	for _, f := range []string{"stopReason", "model", "provider", "api", "errorMessage"} {
		if err := c.optional(m, "", f, '"'); err != nil {
			return err
		}
	}
	if raw, ok := m["usage"]; ok && kind(raw) != 'n' {
		u, err := c.object(raw, "usage")
		if err != nil {
			return err
		}
		for _, f := range usageTokenFields {
			if v, ok := u[f]; ok && kind(v) != 'n' && (kind(v) != '0' || v[0] == '-') {
				return c.fail(ErrMalformed, "usage."+f, "want a non-negative number, found %s", describe(v))
			}
		}
	}
	if _, ok := m["content"]; !ok {
		return c.fail(ErrMalformed, "content", "missing (an assistant message needs an array of content parts)")
	}
	return c.content(m, false, s)
}

// content checks "content": an array of parts, or (when stringOK) a plain string.
func (c checker) content(m object, stringOK bool, s *Stats) error {
	raw, ok := m["content"]
	if !ok {
		return c.fail(ErrMalformed, "content", "missing")
	}
	switch kind(raw) {
	case '"':
		if stringOK {
			return nil
		}
	case '[':
		return elements(raw, func(i int, p []byte) error {
			return c.part(p, "content["+itoa(i)+"]", s)
		})
	}
	want := "an array of content parts"
	if stringOK {
		want = "a string or " + want
	}
	return c.fail(ErrMalformed, "content", "want %s, found %s", want, describe(raw))
}

func (c checker) part(raw json.RawMessage, field string, s *Stats) error {
	p, err := c.object(raw, field)
	if err != nil {
		return err
	}
	typ, err := c.requireString(p, field+".", "type", false)
	if err != nil {
		return err
	}
	switch typ {
	case "text":
		err = c.checkString(p, field+".", "text", false)
	case "thinking":
		err = c.checkString(p, field+".", "thinking", false)
	case "image":
		if !present(p, "data") && !present(p, "url") {
			return c.fail(ErrMalformed, field, "an image needs inline base64 \"data\" or a \"url\"")
		}
		err = c.all(c.optional(p, field+".", "data", '"'), c.optional(p, field+".", "url", '"'), c.optional(p, field+".", "mimeType", '"'))
	case "toolCall":
		s.ToolCalls++
		if err = c.checkString(p, field+".", "id", true); err == nil {
			if err = c.checkString(p, field+".", "name", true); err == nil {
				if a, ok := p["arguments"]; !ok || kind(a) != '{' {
					return c.fail(ErrMalformed, field+".arguments", "want an object, found %s", describe(a))
				}
			}
		}
	default:
		return c.fail(ErrUnknownContentType, field+".type", "%q (want text, thinking, image or toolCall)", typ)
	}
	return err
}

// requireString returns the string member name of o; nonEmpty refuses "".
func (c checker) requireString(o object, prefix, name string, nonEmpty bool) (string, error) {
	if err := c.checkString(o, prefix, name, nonEmpty); err != nil {
		return "", err
	}
	return stringValue(o[name]), nil
}

// checkString checks that member name of o is a string (nonEmpty: not ""), without decoding it:
// most strings checked (a message's text, a tool call's arguments) are long, and never read here.
func (c checker) checkString(o object, prefix, name string, nonEmpty bool) error {
	raw, ok := o[name]
	if !ok {
		return c.fail(ErrMalformed, prefix+name, "missing")
	}
	if kind(raw) != '"' {
		return c.fail(ErrMalformed, prefix+name, "want a string, found %s", describe(raw))
	}
	// A string is empty only when written "": every escape decodes to at least one byte.
	if nonEmpty && len(raw) == 2 {
		return c.fail(ErrMalformed, prefix+name, "must not be empty")
	}
	return nil
}

// present reports whether member name is there and not null.
func present(o object, name string) bool {
	raw, ok := o[name]
	return ok && kind(raw) != 'n'
}

// optional checks the JSON kind of member name when it is present and not null.
func (c checker) optional(o object, prefix, name string, want byte) error {
	raw, ok := o[name]
	if !ok || kind(raw) == want || kind(raw) == 'n' {
		return nil
	}
	return c.fail(ErrMalformed, prefix+name, "want %s, found %s", kindNames[want], describe(raw))
}

func (c checker) all(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// kind classifies a JSON value by its first byte: '{', '[', '"', '0' (number), 't' (boolean), 'n'.
func kind(raw json.RawMessage) byte {
	if len(raw) == 0 {
		return 0
	}
	switch b := raw[0]; {
	case b == '-' || b >= '0' && b <= '9':
		return '0'
	case b == 'f':
		return 't'
	default:
		return b
	}
}

var kindNames = map[byte]string{'{': "an object", '[': "an array", '"': "a string", '0': "a number", 't': "a boolean", 'n': "null"}

func describe(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	name := kindNames[kind(raw)]
	if name == "" {
		name = "a value"
	}
	if len(raw) <= 40 {
		return name + " " + string(raw)
	}
	return name
}
