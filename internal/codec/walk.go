package codec

import (
	"bytes"
	"encoding/json"
	"iter"
)

// The walkers below read JSON already validated and compact (validCompact said so, or json.Compact
// made it so: see canonical), so they only need to find where values end: one cheap pass, instead of
// encoding/json re-validating every nested value it is asked to decode.

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	default: // number, true, false, null: up to the next delimiter
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
			i++
		}
		return i
	}
}

// skipString returns the index just past the string whose opening quote is b[i] (len(b) if it does
// not end). It jumps from quote to quote with bytes.IndexByte, many times faster than a loop over
// every byte on the long strings of a conversation: a quote ends the string unless an odd number of
// backslashes precede it (each pair is one escaped backslash). It is exact on any bytes, not only
// valid JSON: isCompact runs it on payloads not yet validated.
func skipString(b []byte, i int) int {
	start := i
	for i++; i < len(b); i++ {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			break
		}
		i += q
		backslashes := 0
		for j := i - 1; j > start && b[j] == '\\'; j-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return i + 1
		}
	}
	return len(b)
}

// elements calls fn for each element of the array b.
func elements(b []byte, fn func(i int, v []byte) error) error { return tapedElements(b, nil, fn) }

// tapedElements is elements jumping over the values t knows the end of.
func tapedElements(b []byte, t *tape, fn func(i int, v []byte) error) error {
	n := 0
	for i := 1; i < len(b)-1; {
		end := t.skip(b, i)
		if err := fn(n, b[i:end]); err != nil {
			return err
		}
		n++
		i = end + 1 // past the comma
	}
	return nil
}

// member is one member of a JSON object: its key, unescaped, and its value as written.
type member struct {
	key, value []byte
}

// object is one JSON object's members, in the order written, looked up by exact key (encoding/json
// would match struct fields case-insensitively, and "Role" is not "role"). A key written twice
// means its last value, as encoding/json (and a map filled in order) decides.
//
// It is a slice, not a map: a message has a handful of members, a linear search over them is faster
// than hashing, and the slices of every object of a message share one reused buffer (checker.object),
// so validating a message allocates nothing.
type object []member

// get returns the value of member name, and whether there is one.
func (o object) get(name string) ([]byte, bool) {
	for i := len(o) - 1; i >= 0; i-- { // from the end: the last of duplicate keys wins
		if string(o[i].key) == name {
			return o[i].value, true
		}
	}
	return nil, false
}

// value returns the value of member name, nil if there is none.
func (o object) value(name string) []byte {
	v, _ := o.get(name)
	return v
}

// has reports whether there is a member name.
func (o object) has(name string) bool {
	_, ok := o.get(name)
	return ok
}

// len returns the number of distinct keys.
func (o object) len() int {
	n := 0
	for i := range o {
		if !o.overridden(i) {
			n++
		}
	}
	return n
}

// all yields each distinct key once, with its value (the last written).
func (o object) all() iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for i, m := range o {
			if !o.overridden(i) && !yield(string(m.key), m.value) {
				return
			}
		}
	}
}

// overridden reports whether the key of member i is written again after it.
func (o object) overridden(i int) bool {
	for _, later := range o[i+1:] {
		if bytes.Equal(later.key, o[i].key) {
			return true
		}
	}
	return false
}

// members returns the members of the object b.
func members(b []byte) object { return appendMembers(make(object, 0, 8), b, nil) }

// appendMembers appends the members of the object b to dst, jumping over the values t (if not
// nil) knows the end of. Keys written with escapes are
// unescaped, so "\u0072ole" is "role", as JSON says; other keys and all values are slices of b.
func appendMembers(dst object, b []byte, t *tape) object {
	for i := 1; i < len(b)-1; {
		kend := skipString(b, i)
		key := b[i+1 : kend-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			_ = json.Unmarshal(b[i:kend], &k)
			key = []byte(k)
		}
		vend := t.skip(b, kend+1)
		dst = append(dst, member{key: key, value: b[kend+1 : vend]})
		i = vend + 1
	}
	return dst
}

// stringValue returns the unescaped content of the JSON string raw.
func stringValue(raw []byte) string {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		if name, ok := names[string(inner)]; ok {
			return name // no copy of the roles and types every message has
		}
		return string(inner)
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// SplitCanonical splits raw, canonical messages joined by ",", into the messages. The bytes are
// trusted (they were validated when stored, and every read is checked against its hash), so this
// only finds where each message ends.
func SplitCanonical(raw []byte) [][]byte {
	var out [][]byte
	for i := 0; i < len(raw); {
		end := skipValue(raw, i)
		out = append(out, raw[i:end:end])
		i = end + 1
	}
	return out
}

// LargeStrings returns where the JSON strings of canonical raw that are at least min bytes long
// (quotes included) are, as [start, end) offsets, in order. Object keys count as strings too: what
// is returned is only ever cut out and put back byte for byte.
func LargeStrings(raw []byte, min int) [][2]int {
	var out [][2]int
	for i := 0; i < len(raw); {
		q := bytes.IndexByte(raw[i:], '"') // outside strings, canonical JSON has no other quote
		if q < 0 {
			break
		}
		start := i + q
		end := skipString(raw, start)
		if end-start >= min {
			out = append(out, [2]int{start, end})
		}
		i = end
	}
	return out
}

// names are the strings validation reads to compare them (roles, types): stringValue returns these
// very strings instead of a copy. Missing one costs an allocation, nothing else.
var names = func() map[string]string {
	m := make(map[string]string)
	add := func(ss ...string) {
		for _, s := range ss {
			m[s] = s
		}
	}
	add(RoleUser, RoleAssistant, RoleToolResult, RoleExtension, "system", "developer", "tool", "USER",
		"text", "thinking", "image", "toolCall", "function", "message", "compaction", "Compaction")
	add(agentSquadBlocks...)
	add(antigravityTypes...)
	for _, table := range []map[string][]string{anthropicBlocks, swiftItems, responsesMessageParts} {
		for k, v := range table {
			add(k)
			add(v...)
		}
	}
	for k := range responsesItems {
		add(k)
	}
	return m
}()
