package oldcodec

import (
	"bytes"
	"encoding/json"
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
func elements(b []byte, fn func(i int, v []byte) error) error {
	n := 0
	for i := 1; i < len(b)-1; {
		end := skipValue(b, i)
		if err := fn(n, b[i:end]); err != nil {
			return err
		}
		n++
		i = end + 1 // past the comma
	}
	return nil
}

// members returns the members of the object b by key. Keys written with escapes are unescaped, so
// "\u0072ole" is "role", as JSON says.
func members(b []byte) object {
	o := make(object, 8)
	for i := 1; i < len(b)-1; {
		kend := skipString(b, i)
		key := b[i+1 : kend-1]
		var k string
		if bytes.IndexByte(key, '\\') >= 0 {
			_ = json.Unmarshal(b[i:kend], &k)
		} else {
			k = string(key)
		}
		vend := skipValue(b, kend+1)
		o[k] = b[kend+1 : vend]
		i = vend + 1
	}
	return o
}

// stringValue returns the unescaped content of the JSON string raw.
func stringValue(raw []byte) string {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
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
