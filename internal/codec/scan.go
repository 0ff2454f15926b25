package codec

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// validCompact reports whether payload is already canonical: valid UTF-8, valid JSON, and compact
// (no white space outside strings). It is the one pass that replaces three on the common path (a
// client's JSON.stringify or json.Marshal output): utf8.Valid, isCompact and json.Valid.
//
// It may say no to a payload those three accept (one nested deeper than maxFastDepth), never yes
// to one they refuse: a "no" only sends the payload down the slower path (compact), which decides
// and names the error. So the set of accepted payloads and every error stay those of that path.
func validCompact(payload []byte) bool { return validCompactTaped(payload, nil) }

// validCompactTaped is validCompact recording on t (when not nil) where the payload's containers
// and long strings end. On a "no", what t holds is to be thrown away.
func validCompactTaped(payload []byte, t *tape) bool {
	end := scanValue(payload, 0, 0, t)
	return end == len(payload)
}

// maxFastDepth bounds the recursion of scanValue; deeper payloads take the slower path, where
// encoding/json applies its own limit (10,000).
const maxFastDepth = 1000

// scanValue returns the index just past the JSON value starting at b[i], or -1 if there is none
// there (or there is white space, or it nests deeper than maxFastDepth).
func scanValue(b []byte, i, depth int, t *tape) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		end := scanString(b, i)
		if t != nil && end-i >= tapedString {
			t.addString(i, end)
		}
		return end
	case c == '{' || c == '[':
		if depth >= maxFastDepth {
			return -1
		}
		if t == nil || t.full() {
			return scanContainer(b, i, depth+1, t)
		}
		k := len(t.spans)
		t.spans = append(t.spans, span{i, -1}) // its end once known: spans stay in order of start
		end := scanContainer(b, i, depth+1, t)
		t.spans[k].end = end
		return end
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(b, i)
	}
	return -1
}

// scanContainer scans the object or array whose opening bracket is b[i]: members "key":value (or
// elements) separated by commas, up to the matching bracket.
func scanContainer(b []byte, i, depth int, t *tape) int {
	isObject := b[i] == '{'
	closing := byte(']')
	if isObject {
		closing = '}'
	}
	i++
	if i < len(b) && b[i] == closing {
		return i + 1
	}
	for {
		if isObject {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			name := i
			if i = scanString(b, i); i < 0 || i >= len(b) || b[i] != ':' {
				return -1
			}
			if t != nil && i-name >= tapedString {
				t.addName(name, i)
			}
			i++
		}
		if i = scanValue(b, i, depth, t); i < 0 || i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i++
		case closing:
			return i + 1
		default:
			return -1
		}
	}
}

// stringSafe marks the bytes a string may hold as they are: printable ASCII but the quote and the
// backslash. Everything else (end, escape, control character, multi-byte UTF-8) needs a look.
var stringSafe = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString scans the string whose opening quote is b[i]: escapes as JSON defines them, no
// control characters, and valid UTF-8 (what utf8.Valid checks; outside strings, only ASCII is JSON).
func scanString(b []byte, i int) int {
	for i++; i < len(b); {
		i = plainRun(b, i)
		for i < len(b) && stringSafe[b[i]] { // the plain text plainRun leaves: b's last bytes
			i++
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 < len(b) && shortEscape[b[i+1]] { // \n, \", \\ ...: most escapes, one step
				i += 2
			} else if i = scanEscape(b, i); i < 0 {
				return -1
			}
		case c < 0x20:
			return -1
		default: // c >= 0x80
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return -1
			}
			i += n
		}
	}
	return -1
}

// plainRun returns the index of the first byte from b[i] on that stringSafe does not mark, reading
// the plain text of a string 8 bytes at a time; within the last 7 bytes of b it stops at the first
// byte it cannot read as a whole word, and scanString's byte-by-byte loop goes on from there. It
// only skips plain bytes, so what scanString accepts is unchanged.
//
// A byte is not plain when it is at or above 0x80 (its high bit: w&highs), below 0x20, a quote or
// a backslash. The last three are "Bit Twiddling Hacks"' hasless(w, 0x20) and haszero(w^c): w - n
// borrows into a byte's high bit when that byte is under n, and &^w keeps the high bits of the
// bytes below 0x80 (the same as ~(w^c)'s, c being ASCII). A borrow also runs on into the bytes
// above the first such byte, so a flag there can be false, never the lowest one: the lowest flag
// is the first byte that is not plain.
func plainRun(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		control := w - 0x20*ones
		quote := (w ^ '"'*ones) - ones
		backslash := (w ^ '\\'*ones) - ones
		if flags := ((control|quote|backslash)&^w | w) & highs; flags != 0 {
			return i + bits.TrailingZeros64(flags)/8
		}
	}
	return i
}

// shortEscape marks the bytes that make a two-byte escape after a backslash.
var shortEscape = func() (t [256]bool) {
	for _, c := range []byte(`"\/bfnrt`) {
		t[c] = true
	}
	return t
}()

// scanEscape returns the index just past the escape sequence starting with the backslash b[i].
// Like encoding/json, it accepts any four hex digits after \u (a lone surrogate too: decoding makes
// it U+FFFD).
func scanEscape(b []byte, i int) int {
	if i+1 >= len(b) {
		return -1
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2
	case 'u':
		if i+6 > len(b) {
			return -1
		}
		for _, h := range b[i+2 : i+6] {
			if !isHex(h) {
				return -1
			}
		}
		return i + 6
	}
	return -1
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scanLiteral scans true, false or null.
func scanLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// scanNumber scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, the JSON number.
func scanNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i+1 >= len(b) || !isDigit(b[i+1]) {
			return -1
		}
		i = digits(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		i = digits(b, i)
	}
	return i
}

// digits returns the index of the first byte from b[i] on that is not a decimal digit.
func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
