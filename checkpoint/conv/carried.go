package conv

import "encoding/json"

// Carried members. A provider view carries what the model knows and the dialect has no field for
// as a member of the written message under its native name (docs/format.md §1.2); decoding that
// dialect reads such a member back into the model. A member is read back only when it holds the
// kind native gives it (a string, a number, an object, a boolean): anything else, null included,
// stays in Extra as it came, so nothing a runtime wrote under one of these names is lost.

// The members carried, by the role of the message that carries them.
var (
	carriedAssistant = []string{"model", "provider", "api", "stopReason", "errorMessage", "usage", "timestamp"}
	carriedResult    = []string{"toolName", "isError", "timestamp"}
	carriedOther     = []string{"timestamp"}
)

// carriedFor is the members a message of role r carries.
func carriedFor(r Role) []string {
	switch r {
	case RoleAssistant:
		return carriedAssistant
	case RoleToolResult:
		return carriedResult
	}
	return carriedOther
}

// readCarried reads the members of o named in names into m and returns the names it read.
func readCarried(o object, m *Message, names ...string) []string {
	var read []string
	for _, n := range names {
		v, ok := o.value(n)
		if !ok || len(v) == 0 {
			continue
		}
		if readOne(m, n, v) {
			read = append(read, n)
		}
	}
	return read
}

func readOne(m *Message, name string, v json.RawMessage) bool {
	switch name {
	case "timestamp":
		if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
			return false
		}
		m.Timestamp = json.Number(v)
	case "usage":
		if v[0] != '{' {
			return false
		}
		m.Usage = decodeUsage(v)
	case "isError":
		if string(v) != "true" && string(v) != "false" {
			return false
		}
		m.IsError = string(v) == "true"
	default:
		if v[0] != '"' {
			return false
		}
		var s string
		_ = json.Unmarshal(v, &s)
		switch name {
		case "model":
			m.Model = s
		case "provider":
			m.Provider = s
		case "api":
			m.API = s
		case "stopReason":
			m.StopReason = s
		case "errorMessage":
			m.ErrorMessage = s
		case "toolName":
			m.ToolName = s
		default:
			return false
		}
	}
	return true
}

// carriedKnown is m's members named in names, as native encodes them, leaving out unset ones.
func (m *Message) carriedKnown(names ...string) []known {
	var ks []known
	for _, k := range m.nativeKnown() {
		if !k.omit && contains(names, k.name) {
			ks = append(ks, k)
		}
	}
	return ks
}

// withExtra is the members ks then extra, for a message written anew. An extra member of a name
// ks already writes is the same member come back (a "type" that came in Extra): left out when it
// holds the value written, and refused, named, when it holds another (it would be lost).
func withExtra(ks []known, extra []Field, refuse func(string) error) ([]byte, error) {
	var rest []Field
	for _, f := range extra {
		if i := indexKnown(ks, f.Name); i >= 0 {
			if string(ks[i].enc) != string(f.Value) {
				return nil, refuse("member " + f.Name + " (" + string(f.Value) + ") where the view writes " + string(ks[i].enc))
			}
			continue
		}
		rest = append(rest, f)
	}
	return object{}.encode(ks, rest), nil
}

// splitResults separates the tool results nested in m (anthropic, swift-agent, agentsquad and
// antigravity carry them inside a message) into tool result messages of their own, for a
// dialect that has no nested results: m without them (nil when nothing else is left), then one
// message per result, each with m's timestamp.
func (m *Message) splitResults() (*Message, []Message) {
	var results []Message
	var rest []Part
	for _, p := range m.Content {
		if p.Type != PartToolResult {
			rest = append(rest, p)
			continue
		}
		tr := Message{Role: RoleToolResult, ToolCallID: p.ID, IsError: p.IsError, Content: p.Result, Timestamp: m.Timestamp}
		if tr.Content == nil {
			tr.Content = []Part{}
		}
		for _, f := range p.Extra {
			if f.Name == "toolName" && isString(f.Value) {
				_ = json.Unmarshal(f.Value, &tr.ToolName)
			} else {
				tr.Extra = append(tr.Extra, f)
			}
		}
		results = append(results, tr)
	}
	if len(results) == 0 {
		return m, nil
	}
	if len(rest) == 0 && len(m.Extra) == 0 {
		return nil, results
	}
	head := *m
	head.Content = rest
	if head.Content == nil {
		head.Content = []Part{}
	}
	return &head, results
}

// nestResult is a tool result message as a part nested in a user message (anthropic, swift-agent,
// agentsquad), its toolName carried on the part.
func (m *Message) nestResult() Part {
	p := Part{Type: PartToolResult, ID: m.ToolCallID, IsError: m.IsError, Result: m.Content}
	if m.ToolName != "" {
		p.Extra = []Field{{Name: "toolName", Value: encodeString(m.ToolName)}}
	}
	return p
}

// unnestResult is the converse of nestResult: a user message holding one tool result and nothing
// else is read as a tool result message, with the message's members and the part's.
func unnestResult(m Message) Message {
	if m.Role != RoleUser || !onlyOneResult(m.Content) {
		return m
	}
	r := m.Content[0]
	tr := Message{Role: RoleToolResult, ToolCallID: r.ID, IsError: r.IsError, Content: r.Result, Timestamp: m.Timestamp, Extra: m.Extra}
	for _, f := range r.Extra {
		if f.Name == "toolName" && isString(f.Value) {
			_ = json.Unmarshal(f.Value, &tr.ToolName)
		} else {
			tr.Extra = append(tr.Extra, f)
		}
	}
	return tr
}
