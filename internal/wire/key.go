// Package wire holds the NATS protocol contract shared by the daemon and its clients: how ids become
// subject tokens, the subjects, the headers, the request and reply bodies, and the error codes.
// docs/protocol.md is the prose form of this package; keep the two in step.
package wire

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Defaults for the optional parts of a session key.
const (
	DefaultNamespace = "default"
	DefaultAgent     = "main"
	// MaxIDBytes bounds one id so that encoded subjects and keys stay well inside NATS limits.
	MaxIDBytes = 256
)

// ErrInvalidID is returned for an id that cannot name a session: empty, too long or not UTF-8.
var ErrInvalidID = errors.New("invalid id")

// Key names one agent's conversation: a namespace (user or tenant), a session and an agent.
type Key struct {
	Namespace string `json:"namespace"`
	Session   string `json:"session"`
	Agent     string `json:"agent"`
}

// WithDefaults fills an empty namespace or agent with its default. The session has no default.
func (k Key) WithDefaults() Key {
	if k.Namespace == "" {
		k.Namespace = DefaultNamespace
	}
	if k.Agent == "" {
		k.Agent = DefaultAgent
	}
	return k
}

// Validate reports the first part of the key that cannot be used, naming it.
func (k Key) Validate() error {
	for _, p := range []struct{ name, v string }{{"namespace", k.Namespace}, {"session", k.Session}, {"agent", k.Agent}} {
		if err := ValidateID(p.v); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return nil
}

// String is the human form used in logs and tables: namespace/session/agent with the defaults elided.
func (k Key) String() string {
	s := k.Session
	if k.Namespace != DefaultNamespace {
		s = k.Namespace + "/" + s
	}
	if k.Agent != DefaultAgent {
		s += " (agent " + k.Agent + ")"
	}
	return s
}

// Token is the key as subject tokens: "<ns>.<session>.<agent>", each part encoded with EncodeID.
func (k Key) Token() string {
	return EncodeID(k.Namespace) + "." + EncodeID(k.Session) + "." + EncodeID(k.Agent)
}

// ParseToken is the inverse of Token.
func ParseToken(tok string) (Key, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return Key{}, fmt.Errorf("%w: key token %q has %d parts, want 3", ErrInvalidID, tok, len(parts))
	}
	var k Key
	var err error
	for i, dst := range []*string{&k.Namespace, &k.Session, &k.Agent} {
		if *dst, err = DecodeID(parts[i]); err != nil {
			return Key{}, err
		}
	}
	return k, nil
}

// ValidateID checks that s can be used as an id: non-empty, valid UTF-8, at most MaxIDBytes bytes.
func ValidateID(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty", ErrInvalidID)
	case len(s) > MaxIDBytes:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidID, len(s), MaxIDBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidID)
	}
	return nil
}

// EncodeID turns any id into one token that is safe as a NATS subject token and a JetStream KV key
// part: ASCII letters, digits, '-' and '_' stand for themselves; every other byte becomes "=XX"
// (upper-case hex). So "user@example.com/a.b*c >d" becomes "user=40example=2Ecom=2Fa=2Eb=2Ac=20=3Ed":
// no '.', '*', '>' or white space survives, and ids stay readable in `nats` tooling.
func EncodeID(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isPlain(c) {
			b.WriteByte(c)
			continue
		}
		const hex = "0123456789ABCDEF"
		b.WriteByte('=')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xF])
	}
	return b.String()
}

// DecodeID is the inverse of EncodeID. It refuses anything EncodeID would not have produced, so every
// id has exactly one token.
func DecodeID(tok string) (string, error) {
	b := make([]byte, 0, len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if isPlain(c) {
			b = append(b, c)
			continue
		}
		if c != '=' || i+2 >= len(tok) {
			return "", fmt.Errorf("%w: token %q: unexpected %q at %d", ErrInvalidID, tok, c, i)
		}
		hi, lo := unhex(tok[i+1]), unhex(tok[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("%w: token %q: bad escape at %d", ErrInvalidID, tok, i)
		}
		v := byte(hi<<4 | lo)
		if isPlain(v) {
			return "", fmt.Errorf("%w: token %q: needless escape at %d", ErrInvalidID, tok, i)
		}
		b = append(b, v)
		i += 2
	}
	s := string(b)
	return s, ValidateID(s)
}

func isPlain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// unhex accepts upper-case hex only: one spelling per byte.
func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
