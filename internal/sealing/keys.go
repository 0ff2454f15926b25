// Package sealing is checkpointd's encryption of stored conversation bytes per namespace
// (--namespace-keys), for clusters whose operator must not read them: AES-256-GCM under the
// namespace's key, in an envelope that names the key (docs/format.md §6), bound by its associated
// data to the place the bytes are stored at. It knows nothing of NATS. Two stores use it:
//
//   - format 2 (internal/snapshot/kvstore's Store) seals every piece it writes to cp_segments;
//   - the log engine seals every entry and value through Log, an engine.Log decorator (log.go,
//     docs/format.md §8.12a).
//
// docs/security.md says what it protects and what it does not.
package sealing

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/checkpointd/checkpointd/internal/wire"
)

const (
	// keyBytes is the size of an AES-256 key.
	keyBytes = 32
	// DefaultNamespace is the member of the keys file that applies to every namespace not listed.
	DefaultNamespace = "*"
)

// key is one AES-256-GCM key and its id.
type key struct {
	id   [keyIDSize]byte
	aead cipher.AEAD
}

// Keys holds the keys of --namespace-keys: per namespace, the key new data is sealed with, plus
// older keys that still open what they sealed (keys being rotated out). A nil *Keys seals nothing
// and opens nothing (sealed data then fails with a SealError). A Keys is never changed once
// parsed, so it may be shared by goroutines; a reload makes a new one.
type Keys struct {
	current map[string]*key // namespace (or DefaultNamespace) → sealing key
	byID    map[[keyIDSize]byte]*key
}

// keyID names a key without revealing it: the first 8 bytes of SHA-256 over a fixed label and the
// key. Another implementation derives the same id from the same key.
func keyID(k []byte) [keyIDSize]byte {
	h := sha256.Sum256(append([]byte("checkpointd namespace key id v1\x00"), k...))
	var id [keyIDSize]byte
	copy(id[:], h[:keyIDSize])
	return id
}

// ReadKeysFile reads a --namespace-keys file (see ParseKeys). Errors name the flag, the file and
// the member, never a key.
func ReadKeysFile(path string) (*Keys, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--namespace-keys: %w", err)
	}
	k, err := ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("--namespace-keys %s: %w", path, err)
	}
	return k, nil
}

// ParseKeys parses a JSON object whose members name a namespace, or "*" for every namespace not
// listed, and whose values are a base64 (standard, padded) 32-byte key or an array of them: the
// first seals new data, every one opens what it sealed (keys being rotated out). A namespace named
// twice, or anything after the object, is refused: either would silently drop a key (a key being
// rotated in on a line of its own, say), and what that key sealed would no longer open.
func ParseKeys(data []byte) (*Keys, error) {
	members, err := keyMembers(data)
	if err != nil {
		return nil, err
	}
	if len(members) == 0 {
		return nil, errors.New("no keys: give a key per namespace, or \"*\" for all")
	}
	ks := &Keys{current: map[string]*key{}, byID: map[[keyIDSize]byte]*key{}}
	for _, m := range members {
		ns := m.namespace
		if ns != DefaultNamespace {
			if err := wire.ValidateID(ns); err != nil {
				return nil, fmt.Errorf("namespace %q: %w", ns, err)
			}
		}
		list, err := decodeKeyList(m.value)
		if err != nil {
			return nil, fmt.Errorf("namespace %q: %w", ns, err)
		}
		for i, raw := range list {
			k, err := newKey(raw)
			if err != nil {
				return nil, fmt.Errorf("namespace %q: key %d: %w", ns, i, err)
			}
			if old, ok := ks.byID[k.id]; ok {
				k = old // the same key under two namespaces (or twice): one entry
			}
			ks.byID[k.id] = k
			if i == 0 {
				ks.current[ns] = k
			}
		}
	}
	return ks, nil
}

// keyMember is one member of the keys file, in the file's order.
type keyMember struct {
	namespace string
	value     json.RawMessage
}

// keyMembers reads the keys file's object member by member (a map would keep only the last of a
// name given twice), refusing a name given twice and anything after the object. Errors name the
// member and the byte offset, never a value (a key).
func keyMembers(data []byte) ([]keyMember, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	notObject := func(err error) error { return fmt.Errorf("not a JSON object of namespace → key: %w", err) }
	if tok, err := dec.Token(); err != nil {
		return nil, notObject(err)
	} else if tok != json.Delim('{') {
		return nil, notObject(fmt.Errorf("starts with %s", tokenKind(tok)))
	}
	var members []keyMember
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, notObject(err)
		}
		ns, _ := tok.(string) // an object's member names are strings: Token says so itself otherwise
		if seen[ns] {
			return nil, fmt.Errorf("namespace %q is named twice (at byte %d): give one member per namespace, its keys in one array (the sealing key first)", ns, dec.InputOffset())
		}
		seen[ns] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, fmt.Errorf("namespace %q: %w", ns, err)
		}
		members = append(members, keyMember{namespace: ns, value: value})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, notObject(err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("%s", tokenKind(tok))
		}
		return nil, fmt.Errorf("something follows the JSON object at byte %d (%v): the file must hold one object", dec.InputOffset(), err)
	}
	return members, nil
}

// tokenKind names a JSON token by its kind, never its value (which may be a key).
func tokenKind(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		return fmt.Sprintf("%q", tok)
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	default:
		return "null"
	}
}

// decodeKeyList reads one member's value: a base64 string, or a non-empty array of them.
func decodeKeyList(raw json.RawMessage) ([][]byte, error) {
	var list []string
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		list = []string{one}
	} else if err := json.Unmarshal(raw, &list); err != nil || len(list) == 0 {
		return nil, errors.New("want a base64 key or a non-empty array of them")
	}
	out := make([][]byte, len(list))
	for i, s := range list {
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("key %d: not standard base64", i)
		}
		if len(k) != keyBytes {
			return nil, fmt.Errorf("key %d: %d bytes, AES-256 needs %d (e.g. openssl rand -base64 32)", i, len(k), keyBytes)
		}
		out[i] = k
	}
	return out, nil
}

func newKey(k []byte) (*key, error) {
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &key{id: keyID(k), aead: aead}, nil
}

// sealing returns the key new data of namespace ns is sealed with, or nil: stored as it is.
func (ks *Keys) sealing(ns string) *key {
	if ks == nil {
		return nil
	}
	if k, ok := ks.current[ns]; ok {
		return k
	}
	return ks.current[DefaultNamespace]
}

// Seals reports whether new data of namespace ns is sealed (ns, or "*", has a key).
func (ks *Keys) Seals(ns string) bool { return ks.sealing(ns) != nil }

// Count is how many distinct keys are held, for the start-up log (which never shows a key).
func (ks *Keys) Count() int {
	if ks == nil {
		return 0
	}
	return len(ks.byID)
}

// Dropped returns, sorted, the hex ids of the keys ks holds and next does not: what they sealed no
// longer opens once next is in force.
func (ks *Keys) Dropped(next *Keys) []string {
	var dropped []string
	if ks == nil {
		return nil
	}
	for id := range ks.byID {
		if next == nil || next.byID[id] == nil {
			dropped = append(dropped, hex.EncodeToString(id[:]))
		}
	}
	slices.Sort(dropped)
	return dropped
}

// CheckReload is the rule for replacing the keys in force (old) by a file read again (next) while
// the daemon runs (SIGHUP): encryption cannot be turned on or off (format 2 cuts its pieces with
// room for the envelope only when it was on at start; the log engine is wrapped in a Log only then).
// It returns an error for those, else the ids of the keys next no longer holds (Dropped): dropping
// a key is allowed, though what it sealed no longer opens.
func CheckReload(old, next *Keys) (dropped []string, err error) {
	switch {
	case old == nil && next != nil:
		return nil, errors.New("--namespace-keys was not set at start: restart checkpointd to turn encryption on")
	case old != nil && next == nil:
		return nil, errors.New("--namespace-keys is no longer set: restart checkpointd to turn encryption off")
	}
	return old.Dropped(next), nil
}
