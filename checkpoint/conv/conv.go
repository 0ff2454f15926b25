package conv

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// Conversation is a conversation in the model: its messages, and the dialect it was decoded from.
type Conversation struct {
	Dialect  string
	Messages []Message
}

// Decode validates b as a conversation of the given dialect ("" is native) and maps it into the
// model. It returns codec's typed validation error (message index, field path) on bad input.
func Decode(dialect string, b []byte) (*Conversation, error) {
	if dialect == "" {
		dialect = codec.DialectNative
	}
	parsed, err := codec.ParseLimited(b, codec.Limits{Dialect: dialect})
	if err != nil {
		return nil, err
	}
	decode := decoders[dialect]
	c := &Conversation{Dialect: dialect, Messages: make([]Message, 0, len(parsed.Messages))}
	for i, raw := range parsed.Messages {
		m := decode(raw, i == 0)
		if dialect != codec.DialectNative {
			m.source = source{dialect: dialect, raw: raw, native: m.encodeNativeMessage()}
		}
		c.Messages = append(c.Messages, m)
	}
	return c, nil
}

// Encode writes c in the given dialect ("" is native) in canonical form. A message decoded and
// left unchanged comes back byte for byte in its own dialect. The result is validated as that
// dialect: what it cannot carry is refused with a typed error, never dropped.
func (c *Conversation) Encode(dialect string) ([]byte, error) {
	if dialect == "" {
		dialect = codec.DialectNative
	}
	if err := codec.CheckDialect(dialect); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	var from []int // the message of c each written message comes from
	buf.WriteByte('[')
	for i := range c.Messages {
		out, err := c.Messages[i].encodeIn(dialect, i)
		if err != nil {
			return nil, err
		}
		for _, b := range out {
			if buf.Len() > 1 {
				buf.WriteByte(',')
			}
			buf.Write(b)
			from = append(from, i)
		}
	}
	buf.WriteByte(']')
	if _, err := codec.ParseLimited(buf.Bytes(), codec.Limits{Dialect: dialect}); err != nil {
		ce := &CarryError{Dialect: dialect, Index: -1, Err: err}
		var ve *codec.ValidationError
		if errors.As(err, &ve) && ve.Index >= 0 && ve.Index < len(from) {
			ce.Index = from[ve.Index]
			ce.What = ve.Field
		}
		return nil, ce
	}
	return buf.Bytes(), nil
}

// writer writes one message of the model as zero or more messages of a dialect; index is the
// message's place in the Conversation, for the errors.
type writer func(m *Message, index int) ([]json.RawMessage, error)

// writers are the dialects the model is written in from any message. antigravity is not one: a
// trajectory's steps carry ids and indices its runtime assigns, which a conversion would invent.
var writers = map[string]writer{
	codec.DialectNative: (*Message).toNative,
	"openai-chat":       (*Message).toOpenAIChat,
	"anthropic":         (*Message).toAnthropic,
	"openai-responses":  (*Message).toResponses,
	"swift-agent":       (*Message).toSwift,
	"agentsquad":        (*Message).toAgentSquad,
}

// encodeIn returns m as zero or more messages of dialect.
func (m *Message) encodeIn(dialect string, index int) ([]json.RawMessage, error) {
	if m.source.dialect == dialect && bytes.Equal(m.encodeNativeMessage(), m.source.native) {
		return []json.RawMessage{m.source.raw}, nil // unchanged since decoded: as it came
	}
	if w, ok := writers[dialect]; ok {
		return w(m, index)
	}
	return nil, &CarryError{Dialect: dialect, Index: index, What: "message with role " + string(m.Role) +
		" (" + dialect + " is written only from its own messages, unchanged)", Err: ErrNoConversion}
}

// refuser returns the error that refuses what message index cannot carry in dialect.
func refuser(dialect string, index int) func(what string) error {
	return func(what string) error {
		return &CarryError{Dialect: dialect, Index: index, What: what, Err: ErrNoConversion}
	}
}

// writeSplit writes m with one, after moving its nested tool results into tool result messages
// of their own, written after the rest of m, unless the dialect nests them (nests) and m is a
// user message, the only role that holds them there.
func (m *Message) writeSplit(index int, nests bool, one func(*Message, int) ([]json.RawMessage, error)) ([]json.RawMessage, error) {
	if nests && m.Role == RoleUser {
		return one(m, index)
	}
	head, results := m.splitResults()
	var out []json.RawMessage
	if head != nil {
		b, err := one(head, index)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	for i := range results {
		b, err := one(&results[i], index)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}
