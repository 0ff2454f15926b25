package conv

import (
	"bytes"
	"encoding/json"
)

// Field is one member of a JSON object that the model does not know: its name and its value, kept
// as the exact bytes that came in (canonical form: whitespace removed, nothing else touched).
type Field struct {
	Name  string
	Value json.RawMessage
}

// member is one member of an object as decoded: the key's exact bytes, its value's exact bytes, and
// for a member the model knows, norm: the encoding of the typed value decoded from it. When the
// typed value still encodes to norm at encode time, the raw bytes go out instead, so a decoded and
// unchanged object is its own encoding, byte for byte (escapes, number spellings, nulls).
type member struct {
	key  string
	rawK []byte
	raw  json.RawMessage
	norm []byte
}

// known is a member the model knows, as a type encodes it now.
type known struct {
	name string
	enc  []byte // the value's encoding
	omit bool   // the value is unset: leave it out unless it came in
}

// object is the decoded shape of a JSON object, kept to encode it again in the same order.
type object struct{ members []member }

// parseObject splits a compact JSON object into its members. b must be valid compact JSON.
func parseObject(b []byte) object {
	var o object
	i := 1 // past '{'
	for i < len(b) && b[i] != '}' {
		if b[i] == ',' {
			i++
		}
		kEnd := skipValue(b, i)
		rawK := b[i:kEnd]
		var key string
		_ = json.Unmarshal(rawK, &key)
		vStart := kEnd + 1 // past ':'
		vEnd := skipValue(b, vStart)
		o.members = append(o.members, member{key: key, rawK: rawK, raw: b[vStart:vEnd:vEnd]})
		i = vEnd
	}
	return o
}

// skipValue returns the end of the JSON value that starts at b[i] (compact, valid).
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return len(b)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipValue(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	return j
}

// elements splits a compact JSON array into its elements' bytes.
func elements(b []byte) []json.RawMessage {
	var out []json.RawMessage
	i := 1
	for i < len(b) && b[i] != ']' {
		if b[i] == ',' {
			i++
		}
		end := skipValue(b, i)
		out = append(out, b[i:end:end])
		i = end
	}
	return out
}

// value returns the raw value of member name (the last one, as encoding/json reads duplicates).
func (o object) value(name string) (json.RawMessage, bool) {
	for i := len(o.members) - 1; i >= 0; i-- {
		if o.members[i].key == name {
			return o.members[i].raw, true
		}
	}
	return nil, false
}

// extra returns the members whose names are not in names, in order.
func (o object) extra(names ...string) []Field {
	var out []Field
	for _, m := range o.members {
		if !contains(names, m.key) {
			out = append(out, Field{Name: m.key, Value: m.raw})
		}
	}
	return out
}

// remember records, for each member the model knows, the encoding of what was decoded from it.
func (o *object) remember(ks []known) {
	for i := range o.members {
		for _, k := range ks {
			if k.name == o.members[i].key {
				o.members[i].norm = k.enc
			}
		}
	}
}

// encode writes the object again: members in their original order, each known one as it came when
// its typed value is unchanged (else as it is now, or left out when unset), each unknown one from
// extra (the first of that name not yet written); then the known members and extras that are new.
func (o object) encode(ks []known, extra []Field) []byte {
	var buf bytes.Buffer
	buf.WriteByte('{')
	put := func(rawK []byte, name string, v []byte) {
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		if rawK == nil {
			rawK = encodeString(name)
		}
		buf.Write(rawK)
		buf.WriteByte(':')
		buf.Write(v)
	}
	wroteKnown := map[string]bool{}
	usedExtra := make([]bool, len(extra))
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.name
	}
	for _, m := range o.members {
		if i := indexKnown(ks, m.key); i >= 0 {
			k := ks[i]
			switch {
			case m.norm != nil && bytes.Equal(k.enc, m.norm):
				put(m.rawK, m.key, m.raw) // unchanged: every copy as it came (duplicates too)
			case wroteKnown[m.key] || k.omit:
			default:
				put(m.rawK, m.key, k.enc)
			}
			wroteKnown[m.key] = true
			continue
		}
		for j, f := range extra {
			if !usedExtra[j] && f.Name == m.key {
				usedExtra[j] = true
				put(m.rawK, m.key, f.Value)
				break
			}
		}
	}
	for _, k := range ks {
		if !wroteKnown[k.name] && !k.omit {
			put(nil, k.name, k.enc)
		}
	}
	for j, f := range extra {
		if !usedExtra[j] {
			put(nil, f.Name, f.Value)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

func indexKnown(ks []known, name string) int {
	for i, k := range ks {
		if k.name == name {
			return i
		}
	}
	return -1
}

func contains(names []string, s string) bool {
	for _, n := range names {
		if n == s {
			return true
		}
	}
	return false
}

// encodeString is s as a JSON string, without encoding/json's HTML escaping.
func encodeString(s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// Helpers that build known members.

func str(name, v string) known { return known{name: name, enc: encodeString(v), omit: v == ""} }

func num(name string, v json.Number) known {
	if v == "" {
		return known{name: name, enc: []byte("null"), omit: true}
	}
	return known{name: name, enc: []byte(v)}
}

func boolean(name string, v bool) known {
	if v {
		return known{name: name, enc: []byte("true")}
	}
	return known{name: name, enc: []byte("false"), omit: true}
}

func raw(name string, v json.RawMessage) known {
	if len(v) == 0 {
		return known{name: name, enc: []byte("null"), omit: true}
	}
	return known{name: name, enc: v}
}

// Helpers that read known members; a null or a member of another kind reads as unset (the
// dialect's validation, in internal/codec, refuses wrong kinds before anything reaches here).

func (o object) str(name string) string {
	var s string
	if v, ok := o.value(name); ok {
		_ = json.Unmarshal(v, &s)
	}
	return s
}

func (o object) num(name string) json.Number {
	v, ok := o.value(name)
	if !ok || len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return ""
	}
	return json.Number(v)
}

func (o object) boolean(name string) bool {
	v, _ := o.value(name)
	return string(v) == "true"
}

func (o object) raw(name string) json.RawMessage {
	v, ok := o.value(name)
	if !ok || string(v) == "null" {
		return nil
	}
	return v
}

// compactBytes is b with insignificant whitespace removed.
func compactBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
