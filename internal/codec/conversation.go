package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// Conversation is a validated message array. Each message is kept as its canonical bytes: the input
// bytes with insignificant whitespace removed (json.Compact), so key order, number digits (never a
// float64 round trip), string escapes and unknown fields are all preserved byte for byte.
type Conversation struct {
	Messages []json.RawMessage
	stats    Stats
	canon    []byte // the canonical array as parsed; Messages are slices of it
}

// Stats counts a conversation's messages by role, and its tool calls.
type Stats struct {
	Messages, User, Assistant, ToolResult, Extension, ToolCalls int
}

// Limits bound what Parse accepts.
type Limits struct {
	MaxBytes int64 // largest payload accepted; 0 means no limit
}

// Parse validates payload, a JSON array of messages, and returns it in canonical form.
func Parse(payload []byte) (*Conversation, error) { return ParseLimited(payload, Limits{}) }

// ParseLimited is Parse with limits.
func ParseLimited(payload []byte, lim Limits) (*Conversation, error) {
	if lim.MaxBytes > 0 && int64(len(payload)) > lim.MaxBytes {
		return nil, payloadError(ErrTooLarge, -1, "%d bytes, the limit is %d", len(payload), lim.MaxBytes)
	}
	if !utf8.Valid(payload) {
		return nil, payloadError(ErrMalformed, int64(invalidUTF8At(payload)), "invalid UTF-8")
	}
	if len(bytes.TrimSpace(payload)) == 0 {
		return nil, payloadError(ErrMalformed, 0, "empty payload: the conversation must be a JSON array of messages")
	}
	// One pass validates the whole payload and produces its canonical form; the walk that follows
	// reads the canonical bytes without validating them again.
	var buf bytes.Buffer
	buf.Grow(len(payload))
	if err := json.Compact(&buf, payload); err != nil {
		// Compact does not say where; Unmarshal does. Only the error path pays for a second pass.
		var v json.RawMessage
		if uerr := json.Unmarshal(payload, &v); uerr != nil {
			err = uerr
		}
		return nil, syntaxError(payload, err)
	}
	canon := buf.Bytes()
	if canon[0] != '[' {
		return nil, payloadError(ErrMalformed, -1, "the conversation must be a JSON array of messages, found %s", kindNames[kind(canon)])
	}
	c := &Conversation{canon: canon}
	err := elements(canon, func(i int, msg []byte) error {
		if err := c.stats.add(i, msg); err != nil {
			return err
		}
		c.Messages = append(c.Messages, msg[:len(msg):len(msg)])
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Encode returns the canonical array: "[" + the canonical messages joined by "," + "]".
func (c *Conversation) Encode() []byte {
	if c.canon != nil {
		return c.canon
	}
	out := make([]byte, 0, c.Size())
	out = append(out, '[')
	for i, m := range c.Messages {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return append(out, ']')
}

// Size is len(c.Encode()), without building it.
func (c *Conversation) Size() int {
	n := 2 + max(len(c.Messages)-1, 0)
	for _, m := range c.Messages {
		n += len(m)
	}
	return n
}

// Stats returns the message counts.
func (c *Conversation) Stats() Stats { return c.stats }

// MessageRole returns the role of one canonical message, or "" if it has none.
func MessageRole(msg json.RawMessage) string {
	var m struct {
		Role string `json:"role"`
	}
	_ = json.Unmarshal(msg, &m)
	return m.Role
}

func syntaxError(payload []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return payloadError(ErrMalformed, se.Offset, "%v", se)
	}
	return payloadError(ErrMalformed, int64(len(payload)), "%v", err)
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

func itoa(i int) string { return strconv.Itoa(i) }
