package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
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
	starts   []int  // where each message starts in canon
	large    []span // where the strings of canon of largeMin bytes or more are (Limits.LargeStrings)
	largeMin int
}

// Stats counts a conversation's messages by role, and its tool calls. Each dialect maps its roles
// onto these (docs/format.md, "Dialects"): System counts system and developer messages.
type Stats struct {
	Messages, User, Assistant, ToolResult, Extension, ToolCalls, System int
}

// Limits bound what Parse accepts.
type Limits struct {
	MaxBytes   int64      // largest payload accepted; 0 means no limit
	ImagePaths ImagePaths // what to do with images that name local files (default: keep them)
	Dialect    string     // the conversation's shape (Dialects); "" is native
	// Continues says the payload continues a conversation that has messages already (an append):
	// its first message is not the conversation's first.
	Continues bool
	// LargeStrings, when > 0, has the parse note where the strings of at least this many bytes
	// (quotes included) are, for Conversation.LargeStrings: the scan that validates the payload
	// finds them on its way, instead of a second pass over it.
	LargeStrings int
}

// Parse validates payload, a JSON array of messages, and returns it in canonical form. The result
// may share payload's memory: the caller must not change payload afterwards.
func Parse(payload []byte) (*Conversation, error) { return ParseLimited(payload, Limits{}) }

// ParseLimited is Parse with limits.
func ParseLimited(payload []byte, lim Limits) (*Conversation, error) {
	if lim.MaxBytes > 0 && int64(len(payload)) > lim.MaxBytes {
		return nil, payloadError(ErrTooLarge, -1, "%d bytes, the limit is %d", len(payload), lim.MaxBytes)
	}
	t := getTape()
	defer putTape(t)
	if lim.LargeStrings >= tapedString { // shorter ones are not noted by the scan
		t.largeMin = lim.LargeStrings
	}
	canon, err := canonicalTaped(payload, t)
	if err != nil {
		return nil, err
	}
	if canon[0] != '[' {
		return nil, payloadError(ErrMalformed, -1, "the conversation must be a JSON array of messages, found %s", kindNames[kind(canon)])
	}
	d, err := lookupDialect(lim.Dialect)
	if err != nil {
		return nil, err
	}
	c := newConversation(canon)
	c.large, c.largeMin = largeStrings(canon, lim.LargeStrings, t), lim.LargeStrings
	ck := checker{scratch: t.scratch(), tape: t}
	err = ck.elements(canon, func(i int, msg []byte) error {
		if err := c.stats.add(d, ck.next(i), i == 0 && !lim.Continues, msg); err != nil {
			return err
		}
		c.starts = append(c.starts, cap(canon)-cap(msg))
		c.Messages = append(c.Messages, msg[:len(msg):len(msg)])
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applyImagePaths(c, d, lim)
}

// conversationRoom is a Conversation with room for its first messages in the same allocation: one
// allocation a parse instead of three, for the appends of a message or two that most saves are.
type conversationRoom struct {
	c        Conversation
	messages [8]json.RawMessage
	starts   [8]int
}

// newConversation returns an empty Conversation of canon, with room for 8 messages.
func newConversation(canon []byte) *Conversation {
	r := &conversationRoom{}
	r.c.canon, r.c.Messages, r.c.starts = canon, r.messages[:0], r.starts[:0]
	return &r.c
}

// canonical validates the whole payload and returns its canonical form; the walk that follows
// reads the canonical bytes without validating them again. A payload already compact (what
// JSON.stringify and json.Marshal produce) is its own canonical form: validated in one pass
// (validCompact), not copied; one with white space is validated and compacted in one pass too
// (compactValid). Anything else (an error to name, or nesting deeper than maxFastDepth) takes the
// slower path, whose checks, in this order, decide which error a bad payload gets.
func canonical(payload []byte) ([]byte, error) { return canonicalTaped(payload, nil) }

// canonicalTaped is canonical, recording on t where the values of the canonical form end (t is
// left empty when the slower path decides).
func canonicalTaped(payload []byte, t *tape) ([]byte, error) {
	if t != nil {
		t.reset(cap(payload), len(payload))
	}
	if validCompactTaped(payload, t) {
		return payload, nil
	}
	if t != nil {
		t.reset(0, len(payload)) // the base is known once the copy is made
	}
	if canon, ok := compactValid(payload, t); ok {
		if t != nil {
			t.base = cap(canon)
		}
		return canon, nil
	}
	if t != nil {
		t.reset(0, 0)
		t.largeMin = 0 // nothing noted: ParseLimited finds the large strings itself
	}
	if !utf8.Valid(payload) {
		return nil, payloadError(ErrMalformed, int64(invalidUTF8At(payload)), "invalid UTF-8")
	}
	if len(bytes.TrimSpace(payload)) == 0 {
		return nil, payloadError(ErrMalformed, 0, "empty payload: the conversation must be a JSON array of messages")
	}
	if isCompact(payload) && json.Valid(payload) {
		return payload, nil // only when nested deeper than validCompact goes
	}
	return compact(payload)
}

// largeStrings returns where the strings of canon of at least min bytes are (none if min <= 0): as
// the scan that made canon noted them on t, or, when the slower path made it (it notes nothing) or
// min is below what the scan notes, by reading canon again.
func largeStrings(canon []byte, min int, t *tape) []span {
	if min <= 0 {
		return nil
	}
	if t.largeMin == min {
		return slices.Clone(t.large) // t goes back to its pool
	}
	var out []span
	for _, sp := range LargeStrings(canon, min) {
		out = append(out, span{sp[0], sp[1]})
	}
	return out
}

// compact returns the canonical form of payload, or where it is not valid JSON.
func compact(payload []byte) ([]byte, error) {
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
	return buf.Bytes(), nil
}

// LooksCompact reports whether b, a payload or the start of one, has no white space outside
// strings (a string b cuts short counts to b's end): a guess, for a caller deciding whether to work
// on a payload's bytes before ParseLimited says what its canonical form is. Nothing is validated.
func LooksCompact(b []byte) bool { return isCompact(b) }

// isCompact reports whether payload has no white space outside strings.
func isCompact(payload []byte) bool {
	for i := 0; i < len(payload); i++ {
		switch payload[i] {
		case ' ', '\t', '\n', '\r':
			return false
		case '"':
			i = skipString(payload, i) - 1
		}
	}
	return true
}

// Span returns the canonical bytes of messages from to to-1, as stored: joined by commas. It is a
// slice of the parsed buffer, not a copy.
func (c *Conversation) Span(from, to int) []byte {
	if from >= to {
		return nil
	}
	last := c.Messages[to-1]
	return c.canon[c.starts[from] : c.starts[to-1]+len(last)]
}

// LargeStrings returns what LargeStrings(c.Span(from, to), min) returns: where the strings of those
// messages (member names too) of at least min bytes are, as [start, end) offsets in the span, in
// order. When min is the Limits.LargeStrings c was parsed with, they are the ones the parse noted,
// and the span is not read again.
func (c *Conversation) LargeStrings(from, to, min int) [][2]int {
	msgs := c.Span(from, to)
	if min <= 0 || min != c.largeMin || len(msgs) == 0 {
		return LargeStrings(msgs, min)
	}
	off := c.starts[from]
	end := off + len(msgs)
	k, _ := slices.BinarySearchFunc(c.large, off, func(s span, start int) int { return s.start - start })
	var out [][2]int
	for ; k < len(c.large) && c.large[k].start < end; k++ {
		out = append(out, [2]int{c.large[k].start - off, c.large[k].end - off})
	}
	return out
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
