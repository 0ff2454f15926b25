package oldcodec

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// Annotate returns a copy of a canonical message for a merged multi-agent view: with an "agentId"
// member appended, and, when prefix is set, its first text prefixed with "[agentId] " (user content
// given as a string, or the first text part of a content array, typed or, as in agentsquad, an
// untyped {"text": ...} block). Every other byte is kept as it is.
func Annotate(msg []byte, agent string, prefix bool) []byte {
	id := quoteJSON(agent)
	out := make([]byte, 0, len(msg)+len(id)*2+16)
	if prefix {
		msg = prefixFirstText(msg, "["+agent+"] ")
	}
	out = append(out, msg[:len(msg)-1]...)
	if len(msg) > 2 {
		out = append(out, ',')
	}
	out = append(out, `"agentId":`...)
	out = append(out, id...)
	return append(out, '}')
}

// prefixFirstText puts p in front of the message's first text, if it has one.
func prefixFirstText(msg []byte, p string) []byte {
	content, ok := memberSpan(msg, "content")
	if !ok {
		return msg
	}
	var text [2]int // the span of the JSON string to prefix, inside msg
	switch msg[content[0]] {
	case '"':
		text = content
	case '[':
		found := false
		arr := msg[content[0]:content[1]]
		_ = elements(arr, func(_ int, part []byte) error {
			if found || kind(part) != '{' {
				return nil
			}
			m := members(part)
			// A text part: typed (native, most dialects), or a block named by its one "text"
			// key (agentsquad's Bedrock blocks have no type).
			t, typed := m["type"]
			if typed && kind(t) == '"' && stringValue(t) == "text" || !typed && len(m) == 1 && m["text"] != nil {
				if span, ok := memberSpan(part, "text"); ok && part[span[0]] == '"' {
					base := content[0] + offsetIn(arr, part)
					text = [2]int{base + span[0], base + span[1]}
					found = true
				}
			}
			return nil
		})
		if !found {
			return msg
		}
	default:
		return msg
	}
	var s string
	if json.Unmarshal(msg[text[0]:text[1]], &s) != nil {
		return msg
	}
	quoted := quoteJSON(p + s)
	out := make([]byte, 0, len(msg)+len(p)+8)
	out = append(out, msg[:text[0]]...)
	out = append(out, quoted...)
	return append(out, msg[text[1]:]...)
}

// quoteJSON returns s as a JSON string, without the HTML escaping json.Marshal adds.
func quoteJSON(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
}

// memberSpan returns where the value of member name is in the canonical object obj.
func memberSpan(obj []byte, name string) ([2]int, bool) {
	for i := 1; i < len(obj)-1; {
		kend := skipString(obj, i)
		vend := skipValue(obj, kend+1)
		if stringValue(obj[i:kend]) == name {
			return [2]int{kend + 1, vend}, true
		}
		i = vend + 1
	}
	return [2]int{}, false
}

// offsetIn is where sub (a slice of b) starts within b.
func offsetIn(b, sub []byte) int {
	return cap(b) - cap(sub)
}

// Timestamp returns the "timestamp" member of a canonical message, if it is a number.
func Timestamp(msg []byte) (float64, bool) {
	span, ok := memberSpan(msg, "timestamp")
	if !ok || kind(msg[span[0]:span[1]]) != '0' {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(msg[span[0]:span[1]]), 64)
	return f, err == nil
}
