package codec

// compactValid is the one pass for a payload with white space (Python's json.dumps puts a space
// after every comma and colon; pretty printers add new lines): it validates the payload as
// validCompact does, allowing white space where JSON does, and returns the payload without it —
// what json.Compact returns for a valid payload, which it would reach only after utf8.Valid,
// json.Valid and its own slower scan. It says no (nil, false) to anything it does not accept: the
// slower path then decides, and names the error, as before.
//
// Like validCompactTaped, it records on t (when not nil) where the containers and long strings of
// what it returns end.
func compactValid(payload []byte, t *tape) ([]byte, bool) {
	// out never grows past len(payload), so it keeps one array: the one t's offsets are in.
	c := compactor{b: payload, out: make([]byte, 0, len(payload)), t: t}
	i := c.space(0)
	if i = c.value(i, 0); i < 0 || c.space(i) != len(payload) {
		return nil, false
	}
	c.out = append(c.out, payload[c.from:]...)
	return c.out, true
}

// compactor copies b to out, leaving white space out: from is where the bytes not yet copied begin.
type compactor struct {
	b, out []byte
	from   int
	t      *tape
}

// at returns where b[i] goes in out. Between from and i there is no white space: space copies what
// is before each run of it.
func (c *compactor) at(i int) int { return len(c.out) + i - c.from }

// space returns the index of the first byte from b[i] on that is not white space, copying what
// came before the white space it skips.
func (c *compactor) space(i int) int {
	if i >= len(c.b) || !isSpace(c.b[i]) {
		return i
	}
	c.out = append(c.out, c.b[c.from:i]...)
	for i < len(c.b) && isSpace(c.b[i]) {
		i++
	}
	c.from = i
	return i
}

// value is scanValue with white space allowed inside containers; it copies as it goes.
func (c *compactor) value(i, depth int) int {
	if i < len(c.b) && (c.b[i] == '{' || c.b[i] == '[') {
		if depth >= maxFastDepth {
			return -1
		}
		if c.t == nil || c.t.full() {
			return c.container(i, depth+1)
		}
		k := len(c.t.spans)
		c.t.spans = append(c.t.spans, span{c.at(i), -1})
		end := c.container(i, depth+1)
		if end >= 0 {
			c.t.spans[k].end = c.at(end)
		}
		return end
	}
	end := scanValue(c.b, i, depth, nil) // a string, number or literal has no white space in it
	if c.t != nil && end-i >= tapedString && c.b[i] == '"' {
		c.t.addString(c.at(i), c.at(end))
	}
	return end
}

// container is scanContainer with white space allowed around every token.
func (c *compactor) container(i, depth int) int {
	b := c.b
	isObject := b[i] == '{'
	closing := byte(']')
	if isObject {
		closing = '}'
	}
	if i = c.space(i + 1); i < len(b) && b[i] == closing {
		return i + 1
	}
	for {
		if isObject {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			name := i
			if i = scanString(b, i); i < 0 {
				return -1
			}
			if c.t != nil && i-name >= tapedString {
				c.t.addName(c.at(name), c.at(i)) // before space copies: at(name) is where it goes
			}
			if i = c.space(i); i >= len(b) || b[i] != ':' {
				return -1
			}
			i = c.space(i + 1)
		}
		if i = c.value(i, depth); i < 0 {
			return -1
		}
		if i = c.space(i); i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = c.space(i + 1)
		case closing:
			return i + 1
		default:
			return -1
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
