package importer

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// --- pi: a JSON Lines session; a "message" entry holds a pi-ai message (native) ---

func importPi(data []byte) ([]message, int, error) {
	recs, at, err := lines(data)
	if err != nil {
		return nil, 0, err
	}
	var out []message
	for i, rec := range recs {
		typ := field(rec, "type")
		if msg := member(rec, "message"); typ == "message" && msg != nil && validNative(msg) {
			// The entry without its message: the message is this one (inline).
			out = append(out, message{native: msg, at: []string{at[i]}, records: []json.RawMessage{without(rec, "message")}, inline: true})
			continue
		}
		kind := kindOf(typ)
		switch {
		case typ == "session":
			kind = "session_header"
		case typ == "message": // a pi role native has not (bashExecution, ...)
			kind = kindOf(field(rec, "message", "role"))
		}
		out = append(out, extension(kind, at[i], rec))
	}
	return out, len(recs), nil
}

func validNative(msg json.RawMessage) bool {
	_, err := codec.ParseLimited(append(append([]byte{'['}, msg...), ']'), codec.Limits{})
	return err == nil
}

// without is a compact JSON object without member name (kept in order otherwise).
func without(obj json.RawMessage, name string) json.RawMessage {
	d := json.NewDecoder(bytes.NewReader(obj))
	_, _ = d.Token() // {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for d.More() {
		k, _ := d.Token()
		var v json.RawMessage
		_ = d.Decode(&v)
		if k == name {
			continue
		}
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// --- claude-code: a JSON Lines transcript; user and assistant records hold Anthropic messages ---

func importClaudeCode(data []byte) ([]message, int, error) {
	recs, at, err := lines(data)
	if err != nil {
		return nil, 0, err
	}
	var out []message
	counted := map[string]bool{} // responses whose usage a message carries already
	// An assistant message is streamed one content block a line, each line with the message's id:
	// the lines of one id (with no user or other assistant record between) are one message.
	var open struct {
		id      string
		index   int // in out
		at      []string
		records []json.RawMessage
		blocks  []json.RawMessage
	}
	flush := func() error {
		if open.id == "" {
			return nil
		}
		last := open.records[len(open.records)-1]
		msg := withMember(member(last, "message"), "content", joinArray(open.blocks))
		if counted[open.id] {
			// The rest of a response whose first lines came before a tool result: its usage (each
			// line repeats it) is counted once, on the first part; the records keep every copy.
			msg = without(msg, "usage")
		}
		counted[open.id] = true
		natives, err := viaDialect("anthropic", msg)
		if err != nil {
			return fmt.Errorf("%w: claude-code %s: %v", ErrBadFile, open.at[0], err)
		}
		ms := typed(natives, open.at, open.records)
		out = append(out[:open.index], append(ms, out[open.index+1:]...)...)
		open.id = ""
		return nil
	}
	for i, rec := range recs {
		typ := field(rec, "type")
		msg := member(rec, "message")
		if (typ != "user" && typ != "assistant") || msg == nil {
			kind := kindOf(typ)
			if typ == "system" {
				kind = kindOf(field(rec, "subtype"))
				if kind == "compact_boundary" {
					kind = "compaction" // its summary is the user message that follows
				}
			}
			out = append(out, extension(kind, at[i], rec))
			continue
		}
		if typ == "assistant" {
			id := field(rec, "message", "id")
			blocks, ok := contentBlocks(msg)
			if id != "" && ok {
				if id == open.id {
					open.at, open.records = append(open.at, at[i]), append(open.records, rec)
					open.blocks = append(open.blocks, blocks...)
					continue
				}
				if err := flush(); err != nil {
					return nil, 0, err
				}
				open.id, open.index, open.at, open.records, open.blocks = id, len(out), []string{at[i]}, []json.RawMessage{rec}, blocks
				out = append(out, message{}) // its place
				continue
			}
		}
		if err := flush(); err != nil {
			return nil, 0, err
		}
		natives, err := viaDialect("anthropic", msg)
		if err != nil {
			out = append(out, extension("claude_code_"+typ, at[i], rec)) // a shape conv does not read: kept
			continue
		}
		out = append(out, typed(natives, []string{at[i]}, []json.RawMessage{rec})...)
	}
	if err := flush(); err != nil {
		return nil, 0, err
	}
	return out, len(recs), nil
}

func contentBlocks(msg json.RawMessage) ([]json.RawMessage, bool) {
	var blocks []json.RawMessage
	c := member(msg, "content")
	if len(c) == 0 || c[0] != '[' || json.Unmarshal(c, &blocks) != nil {
		return nil, false
	}
	return blocks, true
}

// withMember is obj with member name's value replaced by v.
func withMember(obj json.RawMessage, name string, v []byte) json.RawMessage {
	d := json.NewDecoder(bytes.NewReader(obj))
	_, _ = d.Token()
	var buf bytes.Buffer
	buf.WriteByte('{')
	for d.More() {
		k, _ := d.Token()
		var val json.RawMessage
		_ = d.Decode(&val)
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		if k == name {
			val = v
		}
		buf.Write(val)
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

func joinArray(elems []json.RawMessage) []byte {
	parts := make([][]byte, len(elems))
	for i, e := range elems {
		parts[i] = e
	}
	return append(append([]byte{'['}, bytes.Join(parts, []byte{','})...), ']')
}

// --- codex: a JSON Lines rollout; response_item payloads are Responses API items ---

// importCodex maps response items through openai-responses. The model a turn ran with (its
// turn_context) is set on its assistant messages, and a token_count event's last_token_usage on
// the last assistant message before it (input without the cached tokens, which are cacheRead, as
// native counts them); the events themselves are kept too.
func importCodex(data []byte) ([]message, int, error) {
	recs, at, err := lines(data)
	if err != nil {
		return nil, 0, err
	}
	var out []message
	model, lastAssistant := "", -1
	for i, rec := range recs {
		typ := field(rec, "type")
		payload := member(rec, "payload")
		if typ == "response_item" && payload != nil {
			if natives, err := viaDialect("openai-responses", payload); err == nil {
				for k, n := range natives {
					if field(n, "role") == "assistant" {
						if model != "" && field(n, "model") == "" {
							natives[k] = withMemberAdded(n, "model", quote(model))
						}
						lastAssistant = len(out) + k
					}
				}
				out = append(out, typed(natives, []string{at[i]}, []json.RawMessage{rec})...)
				continue
			}
		}
		kind := kindOf(typ)
		switch {
		case typ == "session_meta":
			kind = "session_header"
		case typ == "turn_context":
			model = field(rec, "payload", "model")
		case typ == "event_msg" || typ == "response_item": // kept by what the payload is
			kind = kindOf(field(rec, "payload", "type"))
		}
		if kind == "token_count" && lastAssistant >= 0 {
			if u := codexUsage(rec); u != nil && member(out[lastAssistant].native, "usage") == nil {
				out[lastAssistant].native = withMemberAdded(out[lastAssistant].native, "usage", u)
			}
			lastAssistant = -1
		}
		out = append(out, extension(kind, at[i], rec))
	}
	return out, len(recs), nil
}

// codexUsage is a token_count event's last_token_usage as native usage (nil when it has none).
func codexUsage(rec json.RawMessage) json.RawMessage {
	var e struct {
		Payload struct {
			Info *struct {
				Last *struct {
					Input  int64 `json:"input_tokens"`
					Cached int64 `json:"cached_input_tokens"`
					Output int64 `json:"output_tokens"`
					Total  int64 `json:"total_tokens"`
				} `json:"last_token_usage"`
			} `json:"info"`
		} `json:"payload"`
	}
	if json.Unmarshal(rec, &e) != nil || e.Payload.Info == nil || e.Payload.Info.Last == nil {
		return nil
	}
	u := e.Payload.Info.Last
	if u.Cached > u.Input || u.Input < 0 || u.Output < 0 || u.Total < 0 {
		return nil // not counts native can hold: the event keeps them
	}
	b, _ := json.Marshal(map[string]int64{"input": u.Input - u.Cached, "output": u.Output, "cacheRead": u.Cached, "totalTokens": u.Total})
	return b
}

func quote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
