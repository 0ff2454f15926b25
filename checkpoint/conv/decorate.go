package conv

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Send-time decorations. A provider view is often sent at once: ViewOptions shape it for that, on
// a copy. The conversation given (and so what is stored) is never changed, and a decoration is
// never saved unless the caller saves the view itself.

// ViewOptions shape a provider view. The zero value adds and leaves out nothing: the view carries
// everything or refuses.
type ViewOptions struct {
	// OmitThinking leaves thinking parts out, for a provider that takes none of another's
	// (openai-chat has no place for them). Each one left out is counted in Omitted.
	OmitThinking bool
	// OmitExtensions leaves out the extension messages a provider has no place for: a runtime's
	// own records (session headers, model changes, status updates), never sent to a model. A
	// system_prompt extension is written as the system prompt, not left out; writing native
	// leaves nothing out. Each one left out is counted in Omitted by its kind.
	OmitExtensions bool
	// OmitMembers (anthropic, openai-chat, openai-responses) leaves out the members of each
	// message its provider's API has no field for: those a view carries under native names
	// (timestamp, usage, model, ...) and those of other runtimes, so that the messages are what
	// the API takes. Parts keep theirs (cache_control, a thinking signature). Each one left out
	// is counted in Omitted as "member NAME".
	OmitMembers bool
	// CompactionAsUser writes each compaction marker as a user message holding its summary, as
	// runtimes send it to the model (pi's wording). A marker without a string summary is left as
	// it is.
	CompactionAsUser bool
	// CacheControl (anthropic only) marks the last block of the system prompt and of the last
	// CacheControl messages with "cache_control": {"type": "ephemeral"} (prompt caching; thinking
	// blocks are never marked).
	CacheControl int
	// Reminder adds a text at the end of the view: a part of the last message when it is a user
	// message, else a user message of its own.
	Reminder string
}

// Omitted counts what a view left out because its ViewOptions asked: "thinking", or
// "extension KIND".
type Omitted map[string]int

// ErrViewOption refuses a ViewOptions field that does not apply to the dialect asked for.
var ErrViewOption = errors.New("view option does not apply")

// CompactionPreamble starts the user message CompactionAsUser writes; the summary follows in
// <summary> tags.
const CompactionPreamble = "The conversation history before this point was compacted into the following summary:"

// View writes c in dialect as a provider view shaped by opts. c is not changed. What the view
// cannot carry is refused with a *CarryError, as Encode does.
func (c *Conversation) View(dialect string, opts ViewOptions) ([]byte, Omitted, error) {
	if opts.CacheControl < 0 || (opts.CacheControl > 0 && dialect != "anthropic") {
		return nil, nil, fmt.Errorf("%w: CacheControl %d: only anthropic views, of 0 or more messages", ErrViewOption, opts.CacheControl)
	}
	if _, ok := apiMembers[dialect]; opts.OmitMembers && !ok {
		return nil, nil, fmt.Errorf("%w: OmitMembers: only the views of a provider's API (anthropic, openai-chat, openai-responses), not %s", ErrViewOption, dialect)
	}
	view := &Conversation{Dialect: c.Dialect, Messages: make([]Message, 0, len(c.Messages))}
	omitted := Omitted{}
	var from []int // the message of c each message of the view is
	for i, m := range c.Messages {
		if m, ok := opts.shape(m, dialect, omitted); ok {
			view.Messages = append(view.Messages, m)
			from = append(from, i)
		}
	}
	if opts.Reminder != "" {
		view.remind(opts.Reminder)
	}
	if opts.CacheControl > 0 {
		view.markCache(opts.CacheControl)
	}
	out, err := view.Encode(dialect)
	var ce *CarryError
	if errors.As(err, &ce) && ce.Index >= 0 {
		if ce.Index < len(from) {
			ce.Index = from[ce.Index]
		} else {
			ce.Index = -1 // the reminder's message: not one of c
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if opts.OmitMembers {
		out = onlyAPIMembers(out, apiMembers[dialect], omitted)
	}
	return out, omitted, nil
}

// apiMembers are the members of a message (or item) each provider's API takes.
var apiMembers = map[string][]string{
	"anthropic":        {"role", "content"},
	"openai-chat":      {"role", "content", "name", "tool_calls", "tool_call_id", "refusal"},
	"openai-responses": {"type", "role", "content", "id", "status", "call_id", "name", "arguments", "output", "summary", "encrypted_content"},
}

// withoutCarriedPartMembers is content without the member a view carries on a part itself: the
// toolName of an anthropic tool_result block.
func withoutCarriedPartMembers(content []byte, omitted Omitted) []byte {
	var parts []json.RawMessage
	for _, p := range elements(content) {
		o := parseObject(p)
		if len(p) == 0 || p[0] != '{' || o.str("type") != "tool_result" {
			parts = append(parts, p)
			continue
		}
		b := []byte{'{'}
		for _, m := range o.members {
			if m.key == "toolName" {
				omitted["member toolName"]++
				continue
			}
			if len(b) > 1 {
				b = append(b, ',')
			}
			b = append(append(append(b, m.rawK...), ':'), m.raw...)
		}
		parts = append(parts, append(b, '}'))
	}
	return joinArray(parts)
}

// onlyAPIMembers is the messages of view with only the members keep names, counting the others.
func onlyAPIMembers(view []byte, keep []string, omitted Omitted) []byte {
	var out []json.RawMessage
	for _, b := range elements(view) {
		msg := []byte{'{'}
		for _, m := range parseObject(b).members {
			if !contains(keep, m.key) {
				omitted["member "+m.key]++
				continue
			}
			if len(msg) > 1 {
				msg = append(msg, ',')
			}
			v := m.raw
			if m.key == "content" && len(v) > 0 && v[0] == '[' {
				v = withoutCarriedPartMembers(v, omitted)
			}
			msg = append(append(append(msg, m.rawK...), ':'), v...)
		}
		out = append(out, append(msg, '}'))
	}
	return joinArray(out)
}

// As turns restored bytes of dialect from into a provider view in dialect to (Decode, then View).
func As(restored []byte, from, to string, opts ViewOptions) ([]byte, Omitted, error) {
	c, err := Decode(from, restored)
	if err != nil {
		return nil, nil, err
	}
	return c.View(to, opts)
}

// shape returns m as the view writes it, or false when the options leave it out.
func (o ViewOptions) shape(m Message, dialect string, omitted Omitted) (Message, bool) {
	if m.Role == RoleExtension {
		if m.IsCompaction() && o.CompactionAsUser {
			if u, ok := compactionAsUser(m); ok {
				return u, true
			}
		}
		if _, isSystem := m.fromSystemPrompt(); o.OmitExtensions && !isSystem && dialect != "native" && dialect != "" {
			omitted["extension "+m.Kind]++
			return m, false
		}
		return m, true
	}
	if o.OmitThinking {
		var kept []Part
		for _, p := range m.Content {
			if p.Type == PartThinking {
				omitted["thinking"]++
				continue
			}
			kept = append(kept, p)
		}
		if len(kept) != len(m.Content) {
			m.Content = orNoParts(kept) // a new slice: m's own is the caller's
		}
	}
	return m, true
}

// compactionAsUser is a compaction marker as the user message that hands its summary to a model.
func compactionAsUser(m Message) (Message, bool) {
	if len(m.Data) == 0 || m.Data[0] != '{' {
		return m, false
	}
	summary, ok := parseObject(m.Data).value("summary")
	if !ok || !isString(summary) {
		return m, false
	}
	var s string
	_ = json.Unmarshal(summary, &s)
	text := CompactionPreamble + "\n\n<summary>\n" + s + "\n</summary>"
	return Message{Role: RoleUser, Content: []Part{Text(text)}, Timestamp: m.Timestamp, contentString: true}, true
}

// remind adds text at the end of the view.
func (c *Conversation) remind(text string) {
	if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == RoleUser {
		last := &c.Messages[n-1]
		last.Content = append(append([]Part(nil), last.Content...), Text(text))
		return
	}
	c.Messages = append(c.Messages, Message{Role: RoleUser, Content: []Part{Text(text)}})
}

// cacheMark is anthropic's marker of a prompt-caching breakpoint.
var cacheMark = Field{Name: "cache_control", Value: json.RawMessage(`{"type":"ephemeral"}`)}

// markCache marks the last block of the system prompt and of the last n messages.
func (c *Conversation) markCache(n int) {
	for i := range c.Messages {
		m := &c.Messages[i]
		_, isSystem := m.fromSystemPrompt()
		if m.Role == RoleSystem || isSystem || i >= len(c.Messages)-n {
			markLastBlock(m)
		}
	}
}

// markLastBlock marks m's last block that may carry a marker (not thinking), on copies of the
// parts it changes.
func markLastBlock(m *Message) {
	if m.Role == RoleExtension { // a system_prompt extension: mark the system prompt it holds
		if sys, ok := m.fromSystemPrompt(); ok {
			markLastBlock(sys)
			*m = *sys
		}
		return
	}
	for j := len(m.Content) - 1; j >= 0; j-- {
		p := m.Content[j]
		if p.Type == PartThinking {
			continue
		}
		p.Extra = append(append([]Field(nil), p.Extra...), cacheMark)
		m.Content = append([]Part(nil), m.Content...)
		m.Content[j] = p
		return
	}
}
