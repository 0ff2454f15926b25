package wire

import (
	"bytes"
	"time"
)

// Plain JSON: the two messages of every restore, and a group save's reply, read without
// encoding/json.
//
// A head restore served from the daemon's read cache is one request and one reply, and encoding/json
// (reflection, a validity scan first) cost a noticeable part of it on two busy cores: the daemon's
// decode of the 60-byte read request 6-9 µs, the SDK's decode of the reply's Cp-Version record
// 6-10 µs (docs/format.md §8.15k); the SDK's decode of a group's results ~7 µs each (§8.15n).
// They come in one plain shape from the SDKs and the daemon:
// objects without spaces, strings of printable ASCII without escapes, non-negative integers. The
// decoders here read that shape only, and say so (ok false) for anything else, which the caller
// then gives to encoding/json as before: what either accepts, and how, is unchanged (FuzzPlain*:
// whatever they take, encoding/json reads the same).

// PlainReadRequest reads a read request of the plain shape: an object of session, agent, version,
// offset, encoding, view and maxMessages, each at most once. ok false: not of that shape (a merge,
// an escape, a space, a repeated or unknown key), which says nothing of its validity.
func PlainReadRequest(body []byte) (r ReadRequest, ok bool) {
	p := plain{b: body}
	ok = p.object(func(key []byte) bool {
		switch string(key) {
		case "session":
			return p.str(&r.Session)
		case "agent":
			return p.str(&r.Agent)
		case "encoding":
			return p.str(&r.Encoding)
		case "view":
			return p.str(&r.View)
		case "version":
			return p.uint(&r.Version)
		case "offset":
			return p.int64(&r.Offset)
		case "maxMessages":
			return p.int(&r.MaxMessages)
		}
		return false
	})
	return r, ok && p.end()
}

// PlainVersion reads a version record (the Cp-Version header, docs/protocol.md §5) of the plain
// shape; ok false: not of that shape (an escaped character, say), to be read by encoding/json.
func PlainVersion(b []byte) (v Version, ok bool) {
	p := plain{b: b}
	return v, p.version(&v) && p.end()
}

// PlainGroupResults reads the reply to a group of saves (docs/protocol.md §4.0.1) when it is
// {"results":[...]} of one or more results of stored saves of the plain shape, as the daemon
// writes them; ok false for anything else (a refusal, a space, an escape), to be read by
// encoding/json.
func PlainGroupResults(b []byte) (results []SaveResult, ok bool) {
	p := plain{b: b}
	ok = p.object(func(key []byte) bool {
		if string(key) != "results" {
			return false
		}
		return p.array(func() bool {
			var r SaveResult
			results = append(results, r)
			return p.saveResult(&results[len(results)-1])
		})
	})
	return results, ok && p.end() && len(results) > 0
}

// saveResult reads the result of a stored save (a refusal is left to encoding/json).
func (p *plain) saveResult(r *SaveResult) bool {
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "saveId":
			return p.str(&r.SaveID)
		case "key":
			return p.key(&r.Key)
		case "ok":
			return p.bool(&r.OK)
		case "duplicate":
			return p.bool(&r.Duplicate)
		case "received":
			return p.str(&r.Received)
		case "unverified":
			return p.str(&r.Unverified)
		case "version":
			r.Version = &Version{}
			return p.version(r.Version)
		}
		return false
	})
}

func (p *plain) version(v *Version) bool {
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "format":
			return p.int(&v.Format)
		case "key":
			return p.key(&v.Key)
		case "version":
			return p.uint(&v.Version)
		case "parent":
			return p.uint(&v.Parent)
		case "hash":
			return p.str(&v.Hash)
		case "saveId":
			return p.str(&v.SaveID)
		case "writer":
			return p.str(&v.Writer)
		case "reason":
			return p.str(&v.Reason)
		case "created":
			return p.time(&v.Created)
		case "rawBytes":
			return p.int64(&v.RawBytes)
		case "storedBytes":
			return p.int64(&v.StoredBytes)
		case "counts":
			return p.counts(&v.Counts)
		case "gen":
			return p.uint(&v.Gen)
		case "forkOf":
			v.ForkOf = &ForkRef{}
			return p.object(func(key []byte) bool {
				switch string(key) {
				case "key":
					return p.key(&v.ForkOf.Key)
				case "version":
					return p.uint(&v.ForkOf.Version)
				}
				return false
			})
		case "origin":
			v.Origin = &Origin{}
			return p.object(func(key []byte) bool {
				switch string(key) {
				case "via":
					return p.str(&v.Origin.Via)
				case "source":
					return p.str(&v.Origin.Source)
				case "at":
					return p.time(&v.Origin.At)
				}
				return false
			})
		case "dialect":
			return p.str(&v.Dialect)
		}
		return false
	})
}

// plain scans JSON text of the plain shape.
type plain struct {
	b []byte
	i int
}

func (p *plain) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *plain) end() bool { return p.i == len(p.b) }

// array reads an array, calling elem with the scanner at each element.
func (p *plain) array(elem func() bool) bool {
	if !p.byte('[') {
		return false
	}
	if p.byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.byte(']') {
			return true
		}
		if !p.byte(',') {
			return false
		}
	}
}

func (p *plain) bool(v *bool) bool {
	switch {
	case bytes.HasPrefix(p.b[p.i:], []byte("true")):
		*v, p.i = true, p.i+4
	case bytes.HasPrefix(p.b[p.i:], []byte("false")):
		*v, p.i = false, p.i+5
	default:
		return false
	}
	return true
}

// object reads an object, calling member for each key with the scanner at its value; a key seen
// twice (encoding/json keeps the last), or one member refuses, is not plain.
func (p *plain) object(member func(key []byte) bool) bool {
	if !p.byte('{') {
		return false
	}
	if p.byte('}') {
		return true
	}
	var buf [16][]byte // a handful of keys: a slice beats a map
	seen := buf[:0]
	for {
		key, ok := p.raw()
		if !ok || !p.byte(':') {
			return false
		}
		for _, k := range seen {
			if string(k) == string(key) {
				return false
			}
		}
		seen = append(seen, key)
		if !member(key) {
			return false
		}
		if p.byte('}') {
			return true
		}
		if !p.byte(',') {
			return false
		}
	}
}

// raw reads a string of printable ASCII without escapes and returns its bytes, its value.
func (p *plain) raw() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

func (p *plain) str(s *string) bool {
	b, ok := p.raw()
	*s = string(b)
	return ok
}

// digits reads a non-negative integer of at most 15 digits without a leading zero (JSON's
// grammar): it fits every field it is read into; anything larger is left to encoding/json.
func (p *plain) digits() (uint64, bool) {
	start := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		n = n*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	d := p.i - start
	return n, d > 0 && d <= 15 && (d == 1 || p.b[start] != '0')
}

func (p *plain) uint(n *uint64) bool {
	v, ok := p.digits()
	*n = v
	return ok
}

func (p *plain) int64(n *int64) bool {
	v, ok := p.digits()
	*n = int64(v)
	return ok
}

func (p *plain) int(n *int) bool {
	v, ok := p.digits()
	*n = int(v)
	return ok
}

// time reads a string as time.Time's UnmarshalJSON does (RFC 3339, strictly).
func (p *plain) time(t *time.Time) bool {
	start := p.i
	if _, ok := p.raw(); !ok {
		return false
	}
	return t.UnmarshalJSON(p.b[start:p.i]) == nil
}

func (p *plain) key(k *Key) bool {
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "namespace":
			return p.str(&k.Namespace)
		case "session":
			return p.str(&k.Session)
		case "agent":
			return p.str(&k.Agent)
		}
		return false
	})
}

func (p *plain) counts(c *Counts) bool {
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "messages":
			return p.int(&c.Messages)
		case "user":
			return p.int(&c.User)
		case "assistant":
			return p.int(&c.Assistant)
		case "toolResult":
			return p.int(&c.ToolResult)
		case "extension":
			return p.int(&c.Extension)
		case "toolCalls":
			return p.int(&c.ToolCalls)
		case "system":
			return p.int(&c.System)
		}
		return false
	})
}
