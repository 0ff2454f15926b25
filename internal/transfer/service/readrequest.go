package service

import "github.com/checkpointd/checkpointd/internal/wire"

// decodeReadRequest decodes a read request as decodeRequest does. A body in the plain shape the
// SDKs send (an object of session, agent, version, offset, encoding, view and maxMessages, each at
// most once, strings of printable ASCII without escapes, numbers of digits alone, no spaces) is
// read by canonicalRead, without encoding/json: its reflection cost a restore of a head served
// from the read cache ~9 µs of the daemon's ~40 on two busy cores (docs/format.md §8.15k). Any
// other body (a merge, an escape, a space, a key repeated or unknown) goes to encoding/json as
// before, so that what is accepted, and how, is unchanged.
func decodeReadRequest(body []byte, req *wire.ReadRequest) error {
	if r, ok := canonicalRead(body); ok {
		*req = r
		return req.Validate()
	}
	return decodeRequest(body, req)
}

// canonicalRead reads body if it is in the plain shape decodeReadRequest describes, giving the
// request encoding/json would; ok false otherwise (it then says nothing of the body's validity).
func canonicalRead(body []byte) (r wire.ReadRequest, ok bool) {
	p := plainObject{b: body}
	if !p.byte('{') {
		return r, false
	}
	if p.byte('}') {
		return r, p.end()
	}
	seen := 0 // a bit per key: a repeated key goes to encoding/json (the last one wins there)
	for {
		key, ok := p.str()
		if !ok || !p.byte(':') {
			return r, false
		}
		bit, ok := readKeys[key]
		if !ok || seen&bit != 0 {
			return r, false
		}
		seen |= bit
		switch key {
		case "session":
			r.Session, ok = p.str()
		case "agent":
			r.Agent, ok = p.str()
		case "encoding":
			r.Encoding, ok = p.str()
		case "view":
			r.View, ok = p.str()
		case "version":
			r.Version, ok = p.number()
		case "offset":
			var n uint64
			n, ok = p.number()
			r.Offset = int64(n)
		case "maxMessages":
			var n uint64
			n, ok = p.number()
			r.MaxMessages = int(n)
		}
		if !ok {
			return r, false
		}
		if p.byte('}') {
			return r, p.end()
		}
		if !p.byte(',') {
			return r, false
		}
	}
}

// readKeys are the members canonicalRead reads, each with its bit.
var readKeys = map[string]int{"session": 1, "agent": 2, "version": 4, "offset": 8, "encoding": 16, "view": 32, "maxMessages": 64}

// plainObject scans JSON text of the plain shape canonicalRead takes.
type plainObject struct {
	b []byte
	i int
}

// byte consumes c if it is next.
func (p *plainObject) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether everything was read.
func (p *plainObject) end() bool { return p.i == len(p.b) }

// str reads a string of printable ASCII without escapes: its bytes are its value.
func (p *plainObject) str() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			s := string(p.b[start:p.i])
			p.i++
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return "", false
		}
	}
	return "", false
}

// number reads a non-negative integer of at most 15 digits, without a leading zero (JSON's
// grammar), so that it fits every field it is read into; larger ones go to encoding/json, whose
// error (or Validate's range check) stays what it was.
func (p *plainObject) number() (uint64, bool) {
	start := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		n = n*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	switch {
	case digits == 0 || digits > 15:
		return 0, false
	case digits > 1 && p.b[start] == '0':
		return 0, false
	}
	return n, true
}
