package conv

import (
	"bytes"
	"encoding/json"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// DefaultHistoryLimit is how many messages NewHistory holds in memory.
const DefaultHistoryLimit = 10000

// History is a running agent's conversation in memory: the messages it holds, bounded by Limit,
// its live trackers, and the messages not yet saved.
//
// The limit bounds memory only; it never touches what is stored. When an Append goes past Limit,
// the oldest messages are dropped from memory first, and the trackers' indices (turn starts,
// compactions, error results, the request view's start, the last response) are moved to count in
// the messages held, those that fell off left out; the totals (tokens, cost, calls) still count
// every message ever appended. Messages appended since the last MarkSaved are kept, encoded, until
// saved (Pending): a message dropped from memory is never lost from the session.
type History struct {
	// Limit is the most messages held; 0 holds every one. NewHistory sets DefaultHistoryLimit.
	Limit int
	// Dialect is the dialect Pending writes ("" is native): the session's.
	Dialect string

	msgs    []Message
	dropped int // messages dropped from the front so far: the index of msgs[0] in the conversation
	tracker Tracker
	pending []json.RawMessage
}

// NewHistory returns an empty History holding at most DefaultHistoryLimit messages.
func NewHistory() *History { return &History{Limit: DefaultHistoryLimit} }

// Append adds messages at the end. Each is first written in the History's dialect, for Pending: a
// message the dialect cannot carry is refused with a *CarryError, and nothing of this call is added.
func (h *History) Append(msgs ...Message) error {
	var enc []json.RawMessage
	for i := range msgs {
		out, err := msgs[i].encodeIn(orNativeDialect(h.Dialect), h.dropped+len(h.msgs)+i)
		if err != nil {
			return err
		}
		enc = append(enc, out...)
	}
	if _, err := codec.ParseLimited(joinArray(enc), codec.Limits{Dialect: h.Dialect}); err != nil {
		return &CarryError{Dialect: orNativeDialect(h.Dialect), Index: -1, Err: err}
	}
	h.pending = append(h.pending, enc...)
	for i := range msgs {
		h.msgs = append(h.msgs, msgs[i])
		h.tracker.Add(&h.msgs[len(h.msgs)-1])
	}
	if h.Limit > 0 && len(h.msgs) > h.Limit {
		h.drop(len(h.msgs) - h.Limit)
	}
	return nil
}

// drop lets go of the n oldest messages: cleared, so what they point to is freed now, and sliced
// off; the next append that outgrows the array copies only the messages held (O(1) a message).
func (h *History) drop(n int) {
	clear(h.msgs[:n])
	h.msgs = h.msgs[n:]
	h.dropped += n
}

// Messages returns the messages held, oldest first (the slice is the History's: do not change it).
func (h *History) Messages() []Message { return h.msgs }

// Dropped is how many messages were dropped from memory: the index, in the whole conversation, of
// the first message held.
func (h *History) Dropped() int { return h.dropped }

// Pending returns the messages appended since the last MarkSaved as a JSON array in the History's
// dialect: what to send with Client.Append (or, for a new session, Client.Save).
func (h *History) Pending() []byte { return joinArray(h.pending) }

// MarkSaved forgets the pending messages: they are stored.
func (h *History) MarkSaved() { h.pending = nil }

// Trackers returns the live trackers, their indices counted in the messages held.
func (h *History) Trackers() Trackers {
	t := h.tracker.Trackers()
	shift := func(is []int) []int {
		out := []int{}
		for _, i := range is {
			if i >= h.dropped {
				out = append(out, i-h.dropped)
			}
		}
		return out
	}
	t.TurnStarts, t.Compactions = shift(t.TurnStarts), shift(t.Compactions)
	turns := []Turn{}
	for _, u := range t.Turns {
		if u.Start >= h.dropped {
			u.Start -= h.dropped
			turns = append(turns, u)
		}
	}
	t.Turns = turns
	for _, s := range t.Tools {
		s.ErrorAt = shift(s.ErrorAt)
	}
	if r := t.LastResponse; r != nil {
		if r.Index < h.dropped {
			t.LastResponse = nil
		} else {
			r.Index -= h.dropped
		}
	}
	t.Context.Start = max(t.Context.Start-h.dropped, 0)
	t.Messages = len(h.msgs)
	return t // Unread keeps naming messages by their index in the whole conversation
}

func orNativeDialect(d string) string {
	if d == "" {
		return codec.DialectNative
	}
	return d
}

func joinArray(msgs []json.RawMessage) []byte {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, m := range msgs {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(m)
	}
	buf.WriteByte(']')
	return buf.Bytes()
}
