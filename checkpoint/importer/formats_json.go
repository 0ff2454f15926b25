package importer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Records of the JSON (not JSON Lines) formats are named by their JSON path: "/messages/3".

// obj is a small builder of a native message: members in the order added, values encoded as JSON.
type obj struct{ buf bytes.Buffer }

func (o *obj) set(name string, v any) *obj {
	if o.buf.Len() == 0 {
		o.buf.WriteByte('{')
	} else {
		o.buf.WriteByte(',')
	}
	k, _ := json.Marshal(name)
	o.buf.Write(k)
	o.buf.WriteByte(':')
	var enc bytes.Buffer
	e := json.NewEncoder(&enc)
	e.SetEscapeHTML(false)
	_ = e.Encode(v)
	o.buf.Write(bytes.TrimSuffix(enc.Bytes(), []byte("\n")))
	return o
}

func (o *obj) bytes() json.RawMessage { return append(o.buf.Bytes(), '}') }

type part = map[string]any

func text(s string) part { return part{"type": "text", "text": s} }

// millis is an RFC 3339 time as milliseconds since the epoch (native's timestamp); ok false when
// it is not one.
func millis(s string) (int64, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	return t.UnixMilli(), err == nil
}

// objectArgs is tool call arguments as native needs them, an object: raw itself when it is one, or
// the object a JSON text in a string holds; ok false otherwise.
func objectArgs(raw json.RawMessage) (json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		return raw, true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		var buf bytes.Buffer
		if json.Compact(&buf, []byte(s)) == nil && buf.Len() > 0 && buf.Bytes()[0] == '{' {
			return buf.Bytes(), true
		}
	}
	return nil, false
}

// --- gemini-cli: one JSON object, its messages in "messages" ---

type geminiMessage struct {
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Content   json.RawMessage `json:"content"`
	Model     string          `json:"model"`
	Thoughts  []struct {
		Subject     string `json:"subject"`
		Description string `json:"description"`
	} `json:"thoughts"`
	Tokens *struct {
		Input, Output, Cached, Total *json.Number
	} `json:"tokens"`
	ToolCalls []struct {
		ID     string          `json:"id"`
		Name   string          `json:"name"`
		Args   json.RawMessage `json:"args"`
		Status string          `json:"status"`
		Result []struct {
			FunctionResponse struct {
				Response json.RawMessage `json:"response"`
			} `json:"functionResponse"`
		} `json:"result"`
	} `json:"toolCalls"`
}

func importGemini(data []byte) ([]message, int, error) {
	var file map[string]json.RawMessage
	var list []json.RawMessage
	if err := json.Unmarshal(data, &file); err != nil || json.Unmarshal(file["messages"], &list) != nil {
		return nil, 0, fmt.Errorf("%w: want a Gemini CLI session (an object with \"messages\")", ErrBadFile)
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, data)
	out := []message{extension("session_header", "/", without(buf.Bytes(), "messages"))}
	for i, raw := range list {
		var rec bytes.Buffer
		_ = json.Compact(&rec, raw)
		at := fmt.Sprintf("/messages/%d", i)
		natives, ok := geminiNatives(rec.Bytes())
		if !ok {
			out = append(out, extension(kindOf("gemini_"+field(rec.Bytes(), "type")), at, rec.Bytes()))
			continue
		}
		out = append(out, typed(natives, []string{at}, []json.RawMessage{rec.Bytes()})...)
	}
	return out, len(list) + 1, nil
}

// geminiNatives maps a user or gemini message: a gemini message's thoughts are thinking parts
// ("**subject**\n\ndescription"), its tool calls toolCall parts, each answered by a toolResult
// message after it (Gemini CLI keeps the result inside the call).
func geminiNatives(rec json.RawMessage) ([]json.RawMessage, bool) {
	var g geminiMessage
	var content string
	if json.Unmarshal(rec, &g) != nil || (g.Type != "user" && g.Type != "gemini") || json.Unmarshal(g.Content, &content) != nil {
		return nil, false
	}
	ts, hasTS := millis(g.Timestamp)
	stamp := func(o *obj) json.RawMessage {
		if hasTS {
			o.set("timestamp", ts)
		}
		return o.bytes()
	}
	if g.Type == "user" {
		return []json.RawMessage{stamp((&obj{}).set("role", "user").set("content", []part{text(content)}))}, true
	}
	parts := []part{}
	for _, t := range g.Thoughts {
		parts = append(parts, part{"type": "thinking", "thinking": "**" + t.Subject + "**\n\n" + t.Description})
	}
	if content != "" {
		parts = append(parts, text(content))
	}
	var results []json.RawMessage
	for _, c := range g.ToolCalls {
		args, ok := objectArgs(c.Args)
		if !ok || c.ID == "" {
			return nil, false
		}
		parts = append(parts, part{"type": "toolCall", "id": c.ID, "name": c.Name, "arguments": args})
		r := (&obj{}).set("role", "toolResult").set("toolCallId", c.ID).set("toolName", c.Name).
			set("content", []part{text(geminiOutput(c.Result))}).set("isError", c.Status == "error")
		results = append(results, stamp(r))
	}
	o := (&obj{}).set("role", "assistant").set("content", parts)
	if g.Model != "" {
		o.set("model", g.Model)
	}
	if t := g.Tokens; t != nil {
		u := &obj{}
		for _, n := range []struct {
			name string
			v    *json.Number
		}{{"input", t.Input}, {"output", t.Output}, {"cacheRead", t.Cached}, {"totalTokens", t.Total}} {
			if n.v != nil {
				u.set(n.name, *n.v)
			}
		}
		if u.buf.Len() > 0 {
			o.set("usage", u.bytes())
		}
	}
	return append([]json.RawMessage{stamp(o)}, results...), true
}

// geminiOutput is a tool's result as text: each function response's "output" when it is a string,
// else the response's JSON.
func geminiOutput(result []struct {
	FunctionResponse struct {
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse"`
}) string {
	var out string
	for i, r := range result {
		if i > 0 {
			out += "\n"
		}
		var o struct {
			Output *string `json:"output"`
		}
		if json.Unmarshal(r.FunctionResponse.Response, &o) == nil && o.Output != nil {
			out += *o.Output
		} else {
			out += string(r.FunctionResponse.Response)
		}
	}
	return out
}

// --- openhands: an event stream (a JSON array), or evaluation output (rows with a "history") ---

type openHandsEvent struct {
	Source      string          `json:"source"`
	Action      string          `json:"action"`
	Observation string          `json:"observation"`
	Timestamp   string          `json:"timestamp"`
	Content     *string         `json:"content"`
	Args        json.RawMessage `json:"args"`
	Meta        *struct {
		FunctionName string `json:"function_name"`
		ToolCallID   string `json:"tool_call_id"`
		Response     struct {
			ID      string `json:"id"`
			Model   string `json:"model"`
			Choices []struct {
				Message struct {
					ToolCalls []struct {
						ID       string `json:"id"`
						Function struct {
							Arguments json.RawMessage `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
			Usage map[string]json.RawMessage `json:"usage"`
		} `json:"model_response"`
	} `json:"tool_call_metadata"`
}

func importOpenHands(data []byte, row int) ([]message, int, error) {
	data = bytes.TrimSpace(data)
	var out []message
	var events []json.RawMessage
	prefix := ""
	if len(data) > 0 && data[0] == '[' {
		if err := json.Unmarshal(data, &events); err != nil {
			return nil, 0, fmt.Errorf("%w: want OpenHands events (a JSON array): %v", ErrBadFile, err)
		}
	} else {
		rows, _, err := lines(data)
		if err != nil {
			return nil, 0, err
		}
		if row < 0 || row >= len(rows) {
			return nil, 0, fmt.Errorf("%w: row %d: the file has %d (from 0)", ErrBadFile, row, len(rows))
		}
		if json.Unmarshal(member(rows[row], "history"), &events) != nil {
			return nil, 0, fmt.Errorf("%w: row %d has no \"history\" of events", ErrBadFile, row)
		}
		out = append(out, extension("session_header", fmt.Sprintf("line %d", row+1), without(rows[row], "history")))
		prefix = fmt.Sprintf("line %d", row+1)
	}
	seen := map[string]bool{} // model responses already counted (one response, several actions)
	for i, raw := range events {
		var rec bytes.Buffer
		_ = json.Compact(&rec, raw)
		at := fmt.Sprintf("%s/history/%d", prefix, i)
		if prefix == "" {
			at = fmt.Sprintf("/%d", i)
		}
		native, ok := openHandsNative(rec.Bytes(), seen)
		if !ok {
			kind := field(rec.Bytes(), "action")
			if kind == "" {
				kind = field(rec.Bytes(), "observation")
			}
			out = append(out, extension(kindOf("openhands_"+kind), at, rec.Bytes()))
			continue
		}
		out = append(out, typed([]json.RawMessage{native}, []string{at}, []json.RawMessage{rec.Bytes()})...)
	}
	return out, len(events), nil
}

// openHandsNative maps an event: a message action (user or agent text), an agent action that is
// a tool call (an assistant message with its thought and the call; the model response's model and
// usage on the first action of that response), the observation answering one (a toolResult), an
// error observation answering none (a user message, as OpenHands sends it), or the system prompt.
func openHandsNative(rec json.RawMessage, seen map[string]bool) (json.RawMessage, bool) {
	var e openHandsEvent
	if json.Unmarshal(rec, &e) != nil {
		return nil, false
	}
	var args struct {
		Content string `json:"content"`
		Thought string `json:"thought"`
	}
	_ = json.Unmarshal(e.Args, &args)
	o := &obj{}
	switch {
	case e.Action == "message" && (e.Source == "user" || e.Source == "agent"):
		role := "user"
		if e.Source == "agent" {
			role = "assistant"
		}
		o.set("role", role).set("content", []part{text(args.Content)})
	case e.Action != "" && e.Meta != nil && e.Meta.ToolCallID != "":
		arguments, ok := json.RawMessage(nil), false
		for _, ch := range e.Meta.Response.Choices {
			for _, tc := range ch.Message.ToolCalls {
				if tc.ID == e.Meta.ToolCallID {
					arguments, ok = objectArgs(tc.Function.Arguments)
				}
			}
		}
		if !ok {
			if arguments, ok = objectArgs(e.Args); !ok {
				return nil, false
			}
		}
		parts := []part{}
		first := !seen[e.Meta.Response.ID]
		seen[e.Meta.Response.ID] = true
		if args.Thought != "" && first {
			parts = append(parts, text(args.Thought))
		}
		parts = append(parts, part{"type": "toolCall", "id": e.Meta.ToolCallID, "name": e.Meta.FunctionName, "arguments": arguments})
		o.set("role", "assistant").set("content", parts)
		if m := e.Meta.Response.Model; m != "" {
			o.set("model", m)
		}
		if u := e.Meta.Response.Usage; u != nil && first {
			usage := &obj{}
			for _, n := range [][2]string{{"prompt_tokens", "input"}, {"completion_tokens", "output"},
				{"cache_read_input_tokens", "cacheRead"}, {"cache_creation_input_tokens", "cacheWrite"}, {"total_tokens", "totalTokens"}} {
				if v, ok := u[n[0]]; ok && len(v) > 0 && v[0] >= '0' && v[0] <= '9' {
					usage.set(n[1], v)
				}
			}
			if usage.buf.Len() > 0 {
				o.set("usage", usage.bytes())
			}
		}
	case e.Action == "system" && args.Content != "":
		// The system prompt OpenHands starts with: native's system_prompt extension.
		o.set("role", "extension").set("kind", "system_prompt").set("data", part{"role": "system", "content": args.Content})
	case e.Observation == "error" && e.Meta == nil && e.Content != nil:
		// An error not answering a tool call: OpenHands hands it to the model as a user message.
		o.set("role", "user").set("content", []part{text(*e.Content)})
	case e.Observation != "" && e.Meta != nil && e.Meta.ToolCallID != "" && e.Content != nil:
		o.set("role", "toolResult").set("toolCallId", e.Meta.ToolCallID).set("toolName", e.Meta.FunctionName).
			set("content", []part{text(*e.Content)}).set("isError", e.Observation == "error")
	default:
		return nil, false
	}
	if ts, ok := millis(e.Timestamp); ok {
		o.set("timestamp", ts)
	} else if ts, err := time.Parse("2006-01-02T15:04:05.999999", e.Timestamp); err == nil {
		o.set("timestamp", ts.UnixMilli()) // OpenHands writes local times without a zone: read as UTC
	}
	return o.bytes(), true
}
