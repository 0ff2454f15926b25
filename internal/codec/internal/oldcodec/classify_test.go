package oldcodec

import (
	"bytes"
	"encoding/json"
)

// What a view needs to know of a message, in any dialect: where the model's instructions are,
// where a compaction left its marker, and which messages only answer tool calls (a view must not
// begin with an answer whose call it cut off).

// Class is the part a message plays in a conversation, as views see it.
type Class int

const (
	ClassOther      Class = iota // a turn of the user or the assistant, or anything else
	ClassSystem                  // the model's instructions in line (openai-chat's system, antigravity's SystemMessage)
	ClassToolResult              // only results of tool calls (native toolResult, openai-chat tool, an anthropic user message of tool_result blocks, ...)
	ClassCompaction              // a compaction marker: what the model sees starts here
)

// compactionMarkers are, per dialect that has compaction markers, a string every marker holds (a
// cheap test that spares parsing most messages) and the test itself.
var compactionMarkers = map[string]struct {
	hint string
	is   func(m object) bool
}{
	DialectNative: {`"compaction"`, func(m object) bool {
		return memberString(m, "role") == RoleExtension && memberString(m, "kind") == "compaction"
	}},
	"antigravity":      {`"Compaction"`, func(m object) bool { return typeIs(m, "Compaction") }},
	"openai-responses": {`"compaction"`, func(m object) bool { return typeIs(m, "compaction") }},
}

// memberString returns member name of m if it is a string, else "".
func memberString(m object, name string) string {
	if raw := m[name]; kind(raw) == '"' {
		return stringValue(raw)
	}
	return ""
}

// Classify returns the class of msg, one canonical message of dialect ("" is native). A message
// that is not valid in the dialect is ClassOther: views cut stored conversations, which were
// validated when saved.
func Classify(dialect string, msg []byte) Class {
	if dialect == "" {
		dialect = DialectNative
	}
	d, err := lookupDialect(dialect)
	if err != nil || kind(msg) != '{' || !json.Valid(msg) {
		return ClassOther
	}
	m := members(msg)
	if cm, ok := compactionMarkers[dialect]; ok && bytes.Contains(msg, []byte(cm.hint)) && cm.is(m) {
		return ClassCompaction
	}
	var s Stats
	if d.check(checker{}, m, true, &s) != nil { // first: some roles are allowed only there, and are what is asked
		return ClassOther
	}
	switch {
	case s.System > 0:
		return ClassSystem
	case s.ToolResult > 0:
		return ClassToolResult
	}
	return ClassOther
}

// IsCompaction reports whether msg is a compaction marker of dialect, testing only messages that
// could be one (most are not, and are not parsed).
func IsCompaction(dialect string, msg []byte) bool {
	if dialect == "" {
		dialect = DialectNative
	}
	cm, ok := compactionMarkers[dialect]
	return ok && bytes.Contains(msg, []byte(cm.hint)) && Classify(dialect, msg) == ClassCompaction
}
