package conv

import "encoding/json"

// Role says who a message is from.
type Role string

// The roles of the model. A tool result answers a tool call by its id; an extension message is
// anything else a runtime records (session headers, status updates, compactions), by Kind.
const (
	RoleSystem     Role = "system"
	RoleUser       Role = "user"
	RoleAssistant  Role = "assistant"
	RoleToolResult Role = "toolResult"
	RoleExtension  Role = "extension"
)

// KindCompaction is the Kind of an extension message that marks a compaction: the history before
// it is summarised by its data (native: {"summary": ...}; antigravity: a Compaction step).
const KindCompaction = "compaction"

// PartType says what a content part holds.
type PartType string

// The content part types of the model.
const (
	PartText       PartType = "text"
	PartThinking   PartType = "thinking"
	PartImage      PartType = "image"
	PartToolCall   PartType = "toolCall"
	PartToolResult PartType = "toolResult" // a result nested in a message (anthropic, swift-agent, agentsquad)
)

// Message is one message of a conversation. Which fields mean something depends on Role; Extra
// holds the members the model does not know, verbatim and in order.
type Message struct {
	Role    Role
	Content []Part // system, user, assistant, tool result

	// Assistant messages.
	Model, Provider, API, StopReason, ErrorMessage string
	Usage                                          *Usage

	// Tool results (RoleToolResult).
	ToolCallID, ToolName string
	IsError              bool

	// Extension messages.
	Kind string
	Data json.RawMessage

	// Timestamp as it came (milliseconds since the epoch in native); "" when absent.
	Timestamp json.Number

	Extra []Field

	orig          object
	contentString bool   // content came as a plain string
	sourceRole    string // a system message's role as it came (system, developer)
	source        source // where it came from, when decoded from another dialect
}

// Part is one content part. Which fields mean something depends on Type.
type Part struct {
	Type PartType

	Text     string // PartText
	Thinking string // PartThinking

	// PartImage: inline base64 Data and its MIMEType, or a URL.
	Data, URL, MIMEType string

	// PartToolCall: the call's ID, tool Name and Arguments (a JSON value, kept as it came).
	// PartToolResult: ID is the tool call answered, Result its content, IsError its outcome.
	ID, Name  string
	Arguments json.RawMessage
	Result    []Part
	IsError   bool

	Extra []Field

	orig object
}

// Usage counts the tokens of one assistant response. The counts are kept as they came: never
// rounded through a float64, however large.
type Usage struct {
	Input, Output, CacheRead, CacheWrite, Total json.Number
	Extra                                       []Field

	orig  object
	snake bool // spelled cache_read, cache_write, total_tokens
}

// Text returns a text part.
func Text(s string) Part { return Part{Type: PartText, Text: s} }

// Thinking returns a thinking part.
func Thinking(s string) Part { return Part{Type: PartThinking, Thinking: s} }

// ImageData returns an image part holding base64 data of the given MIME type.
func ImageData(base64, mimeType string) Part {
	return Part{Type: PartImage, Data: base64, MIMEType: mimeType}
}

// ImageURL returns an image part that names its image by URL.
func ImageURL(url string) Part { return Part{Type: PartImage, URL: url} }

// ToolCall returns a tool call part; arguments is a JSON object.
func ToolCall(id, name string, arguments json.RawMessage) Part {
	return Part{Type: PartToolCall, ID: id, Name: name, Arguments: arguments}
}

// TextOf returns the text of m's text parts, joined by newlines.
func (m *Message) TextOf() string {
	s := ""
	for _, p := range m.Content {
		if p.Type == PartText {
			if s != "" {
				s += "\n"
			}
			s += p.Text
		}
	}
	return s
}

// ToolCalls returns m's tool call parts.
func (m *Message) ToolCalls() []Part {
	var out []Part
	for _, p := range m.Content {
		if p.Type == PartToolCall {
			out = append(out, p)
		}
	}
	return out
}

// IsCompaction reports whether m marks a compaction.
func (m *Message) IsCompaction() bool { return m.Role == RoleExtension && m.Kind == KindCompaction }
