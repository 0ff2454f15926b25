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

func importCodex(data []byte) ([]message, int, error) {
	recs, at, err := lines(data)
	if err != nil {
		return nil, 0, err
	}
	var out []message
	for i, rec := range recs {
		typ := field(rec, "type")
		payload := member(rec, "payload")
		if typ == "response_item" && payload != nil {
			if natives, err := viaDialect("openai-responses", payload); err == nil {
				out = append(out, typed(natives, []string{at[i]}, []json.RawMessage{rec})...)
				continue
			}
		}
		kind := kindOf(typ)
		switch {
		case typ == "session_meta":
			kind = "session_header"
		case typ == "event_msg" || typ == "response_item": // kept by what the payload is
			kind = kindOf(field(rec, "payload", "type"))
		}
		out = append(out, extension(kind, at[i], rec))
	}
	return out, len(recs), nil
}
