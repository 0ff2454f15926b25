package checkpoint

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// decodeGroupReply decodes the reply to a group of saves. The results of stored saves are read
// by a decoder written for the shape the daemon writes (docs/format.md §8.15n: encoding/json spent
// ~7 µs on each ~1 KB result, a fifth of a grouped save's CPU); anything else in the reply (a
// refusal, an escaped string, a field it does not know, a null) makes it give up, and the whole
// reply is decoded by encoding/json instead. FuzzGroupReply checks that whatever it accepts,
// encoding/json reads the same.
func decodeGroupReply(data []byte, rep *groupReply) error {
	if r, ok := fastGroupReply(data); ok {
		*rep = r
		return nil
	}
	return json.Unmarshal(data, rep)
}

// groupReply is a group's reply as the SDK reads it: the results, or the refusal of the whole
// group, or (Key) a single save's result from a daemon that does not know groups.
type groupReply struct {
	wire.GroupReply
	Key *wire.Key `json:"key"`
}

// fastGroupReply reads {"results":[...]} of results of stored saves; ok is false for anything
// else.
func fastGroupReply(data []byte) (groupReply, bool) {
	s := scanner{b: data}
	var rep groupReply
	ok := s.object(func(name []byte) bool {
		if string(name) != "results" || rep.Results != nil { // a second list: encoding/json merges them
			return false
		}
		rep.Results = []wire.SaveResult{}
		return s.array(func() bool {
			var res wire.SaveResult
			if !s.saveResult(&res) {
				return false
			}
			rep.Results = append(rep.Results, res)
			return true
		})
	})
	s.space()
	return rep, ok && s.i == len(s.b) && len(rep.Results) > 0
}

// scanner reads JSON from b at i. Every method reports false for what it does not take.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// next skips white space and takes c, if it is next.
func (s *scanner) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object reads an object, calling field for each member's name with the scanner at its value.
func (s *scanner) object(field func(name []byte) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		name, ok := s.raw()
		if !ok || !s.next(':') || !field(name) {
			return false
		}
		if s.next('}') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// array reads an array, calling elem with the scanner at each element.
func (s *scanner) array(elem func() bool) bool {
	if !s.next('[') {
		return false
	}
	if s.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.next(']') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// str reads a string without escapes or control characters, in valid UTF-8.
func (s *scanner) str() (string, bool) {
	v, ok := s.raw()
	return string(v), ok
}

// raw is str's bytes, as they are in b (a member's name is only compared: no copy).
func (s *scanner) raw() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// digits reads an integer as JSON writes it (no leading zero, no fraction or exponent).
func (s *scanner) digits() ([]byte, bool) {
	s.space()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	first := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n := s.i - first
	if n == 0 || n > 1 && s.b[first] == '0' || s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return nil, false
	}
	return s.b[start:s.i], true
}

func (s *scanner) uint(v *uint64) bool {
	d, ok := s.digits()
	if !ok {
		return false
	}
	n, err := strconv.ParseUint(string(d), 10, 64)
	*v = n
	return err == nil
}

func (s *scanner) int64(v *int64) bool {
	d, ok := s.digits()
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(string(d), 10, 64)
	*v = n
	return err == nil
}

func (s *scanner) int(v *int) bool {
	var n int64
	ok := s.int64(&n)
	*v = int(n)
	return ok && int64(int(n)) == n
}

func (s *scanner) bool(v *bool) bool {
	s.space()
	switch {
	case bytes.HasPrefix(s.b[s.i:], []byte("true")):
		*v, s.i = true, s.i+4
	case bytes.HasPrefix(s.b[s.i:], []byte("false")):
		*v, s.i = false, s.i+5
	default:
		return false
	}
	return true
}

func (s *scanner) text(v *string) bool {
	str, ok := s.str()
	*v = str
	return ok
}

func (s *scanner) key(k *wire.Key) bool {
	return s.object(func(name []byte) bool {
		switch string(name) {
		case "namespace":
			return s.text(&k.Namespace)
		case "session":
			return s.text(&k.Session)
		case "agent":
			return s.text(&k.Agent)
		}
		return false
	})
}

// saveResult reads the result of a stored save (a refusal is left to encoding/json).
func (s *scanner) saveResult(r *wire.SaveResult) bool {
	return s.object(func(name []byte) bool {
		switch string(name) {
		case "saveId":
			return s.text(&r.SaveID)
		case "key":
			return s.key(&r.Key)
		case "ok":
			return s.bool(&r.OK)
		case "duplicate":
			return s.bool(&r.Duplicate)
		case "received":
			return s.text(&r.Received)
		case "unverified":
			return s.text(&r.Unverified)
		case "version":
			if r.Version == nil { // a second one is read into the first, as encoding/json does
				r.Version = &wire.Version{}
			}
			return s.version(r.Version)
		}
		return false
	})
}

func (s *scanner) version(v *wire.Version) bool {
	return s.object(func(name []byte) bool {
		switch string(name) {
		case "format":
			return s.int(&v.Format)
		case "key":
			return s.key(&v.Key)
		case "version":
			return s.uint(&v.Version)
		case "parent":
			return s.uint(&v.Parent)
		case "hash":
			return s.text(&v.Hash)
		case "saveId":
			return s.text(&v.SaveID)
		case "writer":
			return s.text(&v.Writer)
		case "reason":
			return s.text(&v.Reason)
		case "created":
			var t string
			return s.text(&t) && v.Created.UnmarshalText([]byte(t)) == nil
		case "rawBytes":
			return s.int64(&v.RawBytes)
		case "storedBytes":
			return s.int64(&v.StoredBytes)
		case "counts":
			return s.counts(&v.Counts)
		case "gen":
			return s.uint(&v.Gen)
		case "dialect":
			return s.text(&v.Dialect)
		}
		return false // forkOf, origin: rare in a group; encoding/json reads them
	})
}

func (s *scanner) counts(c *wire.Counts) bool {
	return s.object(func(name []byte) bool {
		switch string(name) {
		case "messages":
			return s.int(&c.Messages)
		case "user":
			return s.int(&c.User)
		case "assistant":
			return s.int(&c.Assistant)
		case "toolResult":
			return s.int(&c.ToolResult)
		case "extension":
			return s.int(&c.Extension)
		case "toolCalls":
			return s.int(&c.ToolCalls)
		case "system":
			return s.int(&c.System)
		}
		return false
	})
}
