package oldcodec

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A dialect is one shape of conversation history: each agent runtime keeps its own (docs/format.md,
// "Dialects"). A conversation is stored verbatim in the dialect it was saved in; the dialect says
// how each message is validated and counted, and where its images may name local files.
//
// Every dialect validates one message at a time, so an append is checked without its history.

// DialectNative is today's format (pi / phi-core); "" means it too.
const DialectNative = "native"

// ErrUnknownDialect refuses a dialect name this code does not know.
var ErrUnknownDialect = errors.New("unknown dialect")

type dialect struct {
	// check validates message m (an object) and counts it in s. first is true when the message is
	// the conversation's first (not only the payload's: an append continues a conversation).
	check func(c checker, m object, first bool, s *Stats) error
	// images returns the string members of msg's images that name local files.
	images func(msg []byte) []imagePathSpan
	// marker is in every message images may find something in: a cheap test that spares the
	// others (most messages have no image).
	marker string
}

var dialects = map[string]dialect{
	DialectNative:      {check: checkNative, images: nativeImages, marker: `"image"`},
	"openai-chat":      {check: checkOpenAIChat, images: openAIChatImages, marker: `"image_url"`},
	"anthropic":        {check: checkAnthropic, images: anthropicImages, marker: `"source"`},
	"swift-agent":      {check: checkSwiftAgent, images: swiftImages, marker: `"image"`},
	"agentsquad":       {check: checkAgentSquad, images: noImagePaths},
	"openai-responses": {check: checkOpenAIResponses, images: responsesImages, marker: `"input_`},
	"antigravity":      {check: checkAntigravity, images: noImagePaths},
}

// Dialects returns the names of the dialects this code knows, sorted.
func Dialects() []string {
	names := make([]string, 0, len(dialects))
	for n := range dialects {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// CheckDialect refuses a dialect name this code does not know; "" is native.
func CheckDialect(name string) error {
	_, err := lookupDialect(name)
	return err
}

func lookupDialect(name string) (dialect, error) {
	if name == "" {
		name = DialectNative
	}
	d, ok := dialects[name]
	if !ok {
		return dialect{}, &ValidationError{Err: ErrUnknownDialect, Index: -1, Offset: -1,
			Detail: fmt.Sprintf("%q (known: %s)", name, strings.Join(Dialects(), ", "))}
	}
	return d, nil
}

// partFunc checks one element of a content array: p is the element, field its path.
type partFunc func(c checker, p object, field string, s *Stats) error

// parts checks member name of m, a content array whose elements are objects checked by fn.
// stringOK also accepts a plain string; optional also accepts the member missing or null.
func (c checker) parts(m object, prefix, name string, stringOK, optional bool, s *Stats, fn partFunc) error {
	raw, ok := m[name]
	if !ok || kind(raw) == 'n' {
		if optional {
			return nil
		}
		if !ok {
			return c.fail(ErrMalformed, prefix+name, "missing")
		}
	}
	switch kind(raw) {
	case '"':
		if stringOK {
			return nil
		}
	case '[':
		return elements(raw, func(i int, b []byte) error {
			field := prefix + name + "[" + itoa(i) + "]"
			p, err := c.object(b, field)
			if err != nil {
				return err
			}
			return fn(c, p, field, s)
		})
	}
	want := "an array"
	if stringOK {
		want = "a string or an array"
	}
	return c.fail(ErrMalformed, prefix+name, "want %s, found %s", want, describe(raw))
}

// member returns member name of o as an object (required, never null).
func (c checker) member(o object, prefix, name string) (object, error) {
	raw, ok := o[name]
	if !ok {
		return nil, c.fail(ErrMalformed, prefix+name, "missing")
	}
	return c.object(raw, prefix+name)
}

// partType returns the "type" of part p, refusing it when it is not one of known (for a message
// of role role, when role is set).
func (c checker) partType(p object, field, role string, known ...string) (string, error) {
	prefix := field + "."
	if field == "" { // the message's own type
		prefix = ""
	}
	typ, err := c.requireString(p, prefix, "type", true)
	if err != nil {
		return "", err
	}
	if slices.Contains(known, typ) {
		return typ, nil
	}
	in := ""
	if role != "" {
		in = " in a " + role + " message"
	}
	return "", c.fail(ErrUnknownContentType, prefix+"type", "%q (want %s%s)", typ, strings.Join(known, ", "), in)
}

// strings checks that each of names is a string member of o (nonEmpty: not "").
func (c checker) strings(o object, prefix string, nonEmpty bool, names ...string) error {
	for _, n := range names {
		if err := c.checkString(o, prefix, n, nonEmpty); err != nil {
			return err
		}
	}
	return nil
}

// optionals checks that each of names, when present and not null, is of JSON kind want.
func (c checker) optionals(o object, prefix string, want byte, names ...string) error {
	for _, n := range names {
		if err := c.optional(o, prefix, n, want); err != nil {
			return err
		}
	}
	return nil
}

// unknownRole refuses role, naming the roles the dialect has.
func (c checker) unknownRole(role string, known string) error {
	return c.fail(ErrUnknownRole, "role", "%q (want %s)", role, known)
}
