// Package importer turns other agent runtimes' session files into native checkpoint conversations
// (docs/format.md §1.5): pi, Claude Code, Codex CLI, Gemini CLI and OpenHands. Every record of the
// file becomes a message, never dropped: what maps to a user, assistant or tool result message is
// mapped (through checkpoint/conv where the record is in a provider's shape), the rest is kept as
// an extension message whose data is the record. Each message names where it came from in an
// "imported" member, with the records it was mapped from, so that Export gives the file back.
package importer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/checkpointd/checkpointd/checkpoint/conv"
	"github.com/checkpointd/checkpointd/internal/codec"
)

// Formats are the session files Import reads.
var Formats = []string{"pi", "claude-code", "codex", "gemini-cli", "openhands"}

// ErrUnknownFormat refuses a format this package does not read.
var ErrUnknownFormat = errors.New("unknown session file format")

// ErrBadFile refuses a file that is not a session file of the format named: Err says where.
var ErrBadFile = errors.New("not a session file of this format")

// Options choose what to import of a file.
type Options struct {
	// Row is the row of an OpenHands evaluation output (output.jsonl: one trajectory a line) to
	// import, from 0; a file of one trajectory needs none.
	Row int
}

// Result is an imported conversation and what it holds.
type Result struct {
	// Conversation is the native JSON array of the messages.
	Conversation []byte
	// Records counts the records read; Messages the messages written, of which Typed are user,
	// assistant or tool result messages and Extensions (by kind) the records kept as they are.
	Records    int
	Messages   int
	Typed      int
	Extensions map[string]int
}

// A message being written: its native bytes (without the imported member), and where it came from.
type message struct {
	native  json.RawMessage
	at      []string          // the records it came from (a line, or a JSON path)
	records []json.RawMessage // the records themselves, when its bytes are not the record
	inline  bool              // pi: the record's "message" is this message itself
	part    int               // the k-th message of one record (k > 0: no records)
}

// Import reads data, a session file of format, into a native conversation.
func Import(format string, data []byte, opts Options) (*Result, error) {
	var msgs []message
	var records int
	var err error
	switch format {
	case "pi":
		msgs, records, err = importPi(data)
	case "claude-code":
		msgs, records, err = importClaudeCode(data)
	case "codex":
		msgs, records, err = importCodex(data)
	case "gemini-cli":
		msgs, records, err = importGemini(data)
	case "openhands":
		msgs, records, err = importOpenHands(data, opts.Row)
	default:
		return nil, fmt.Errorf("%w: %q (want %s)", ErrUnknownFormat, format, strings.Join(Formats, ", "))
	}
	if err != nil {
		return nil, err
	}
	return finish(format, msgs, records)
}

// finish writes the messages with their imported members and validates the whole as native.
func finish(format string, msgs []message, records int) (*Result, error) {
	r := &Result{Records: records, Messages: len(msgs), Extensions: map[string]int{}}
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, m := range msgs {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(withImported(format, m))
		var head struct{ Role, Kind string }
		_ = json.Unmarshal(m.native, &head)
		if head.Role == codec.RoleExtension {
			r.Extensions[head.Kind]++
		} else {
			r.Typed++
		}
	}
	buf.WriteByte(']')
	if _, err := codec.ParseLimited(buf.Bytes(), codec.Limits{}); err != nil {
		return nil, fmt.Errorf("%w: the imported conversation is not valid native: %v", ErrBadFile, err)
	}
	r.Conversation = buf.Bytes()
	return r, nil
}

// imported is the member naming where a message came from.
type imported struct {
	From    string            `json:"from"`
	At      []string          `json:"at"`
	Part    int               `json:"part,omitempty"`
	Inline  string            `json:"inline,omitempty"`
	Records []json.RawMessage `json:"records,omitempty"`
}

// withImported is m's native bytes with its "imported" member last.
func withImported(format string, m message) []byte {
	imp := imported{From: format, At: m.at, Part: m.part, Records: m.records}
	if m.inline {
		imp.Inline = "message"
	}
	var enc bytes.Buffer
	e := json.NewEncoder(&enc)
	e.SetEscapeHTML(false) // the records' bytes as they came
	_ = e.Encode(imp)
	b := bytes.TrimSuffix(enc.Bytes(), []byte("\n"))
	out := append([]byte(nil), m.native[:len(m.native)-1]...)
	if len(m.native) > 2 {
		out = append(out, ',')
	}
	out = append(out, `"imported":`...)
	out = append(out, b...)
	return append(out, '}')
}

// extension keeps a record as an extension message of kind, its data the record.
func extension(kind string, at string, record json.RawMessage) message {
	var buf bytes.Buffer
	buf.WriteString(`{"role":"extension","kind":`)
	k, _ := json.Marshal(kind)
	buf.Write(k)
	buf.WriteString(`,"data":`)
	buf.Write(record)
	buf.WriteByte('}')
	return message{native: buf.Bytes(), at: []string{at}}
}

// typed is messages of native mapped from records (the first carries them; the others are parts).
func typed(natives []json.RawMessage, at []string, records []json.RawMessage) []message {
	out := make([]message, len(natives))
	for i, n := range natives {
		out[i] = message{native: n, at: at, part: i}
		if i == 0 {
			out[i].records = records
		}
	}
	return out
}

// viaDialect maps one message of a provider's dialect to native messages through conv.
func viaDialect(dialect string, msg json.RawMessage) ([]json.RawMessage, error) {
	c, err := conv.Decode(dialect, append(append([]byte{'['}, msg...), ']'))
	if err != nil {
		return nil, err
	}
	out, err := c.Encode("native")
	if err != nil {
		return nil, err
	}
	var natives []json.RawMessage
	if err := json.Unmarshal(out, &natives); err != nil {
		return nil, err
	}
	return natives, nil
}

// lines splits a JSON Lines file into its records, compacted, each with its line number (from
// 0; blank lines skipped).
func lines(data []byte) ([]json.RawMessage, []string, error) {
	var recs []json.RawMessage
	var at []string
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, line); err != nil || buf.Bytes()[0] != '{' {
			return nil, nil, fmt.Errorf("%w: line %d is not a JSON object", ErrBadFile, i+1)
		}
		recs, at = append(recs, buf.Bytes()), append(at, fmt.Sprintf("line %d", i+1))
	}
	if len(recs) == 0 {
		return nil, nil, fmt.Errorf("%w: no records", ErrBadFile)
	}
	return recs, at, nil
}

// kindOf makes a record type a kind: lower case, words joined by '_'.
func kindOf(s string) string {
	s = strings.NewReplacer("-", "_", " ", "_", ".", "_").Replace(s)
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 && s[i-1] != '_' {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	if b.Len() == 0 {
		return "record"
	}
	return b.String()
}

// field reads member name of record as a string ("" when absent or not a string).
func field(record json.RawMessage, path ...string) string {
	var v any
	d := json.NewDecoder(bytes.NewReader(record))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return ""
	}
	for _, p := range path {
		o, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = o[p]
	}
	s, _ := v.(string)
	return s
}

// member returns the raw member name of a JSON object (nil when absent).
func member(record json.RawMessage, name string) json.RawMessage {
	var o map[string]json.RawMessage
	if json.Unmarshal(record, &o) != nil {
		return nil
	}
	return o[name]
}

// sortedKinds lists r's extension kinds with their counts, for people.
func (r *Result) String() string {
	var kinds []string
	for k, n := range r.Extensions {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("%d records -> %d messages (%d mapped, %d kept as extensions: %s)",
		r.Records, r.Messages, r.Typed, r.Messages-r.Typed, strings.Join(kinds, ", "))
}
