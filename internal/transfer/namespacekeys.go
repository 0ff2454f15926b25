package transfer

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// checkpointd-side encryption of stored conversation bytes, for clusters whose operator must not
// read them (--namespace-keys). It works at the storage edge: every piece the Store writes to
// cp_segments (message segments, record archives, values) is sealed with AES-256-GCM under its
// namespace's key, and opened when read; the domain never sees it. docs/format.md §6 specifies the
// envelope; docs/security.md says what it protects and what it does not.

// Envelope layout: magic, version, key id, nonce, then the GCM ciphertext and tag.
const (
	envelopeMagic   = "CPKE" // never the start of a plain piece 0, which is a blob ("CPKT", docs/format.md §5)
	envelopeVersion = 1
	keyIDSize       = 8
	nonceSize       = 12
	envelopeHeader  = len(envelopeMagic) + 1 + keyIDSize + nonceSize
	// EnvelopeOverhead is what sealing adds to a piece.
	EnvelopeOverhead = envelopeHeader + 16
	// namespaceKeyBytes is the size of an AES-256 key.
	namespaceKeyBytes = 32
	// defaultKeyName is the --namespace-keys member that applies to every namespace not listed.
	defaultKeyName = "*"
)

// SealError reports stored bytes that cannot be opened: sealed with a key this daemon does not
// hold, or that do not authenticate under the key named (a wrong key with the same id is
// impossible, so: altered bytes). It matches snapshot.ErrCorrupt, so a read answers code "corrupt"
// and never returns the bytes.
type SealError struct {
	Namespace string
	Piece     string // the piece's key in cp_segments
	KeyID     string // hex; empty when the envelope is unreadable before its key id
	Reason    string
}

func (e *SealError) Error() string {
	return fmt.Sprintf("namespace %q: stored piece %s: %s", e.Namespace, e.Piece, e.Reason)
}

// Unwrap makes a SealError a snapshot.ErrCorrupt.
func (e *SealError) Unwrap() error { return snapshot.ErrCorrupt }

// namespaceKey is one AES-256-GCM key and its id.
type namespaceKey struct {
	id   [keyIDSize]byte
	aead cipher.AEAD
}

// NamespaceKeys holds the keys of --namespace-keys: per namespace, the key new pieces are sealed
// with, plus older keys that still open what they sealed. A nil *NamespaceKeys seals nothing and
// opens nothing (a sealed piece then fails with a SealError).
type NamespaceKeys struct {
	current map[string]*namespaceKey // namespace (or defaultKeyName) → sealing key
	byID    map[[keyIDSize]byte]*namespaceKey
}

// keyID names a key without revealing it: the first 8 bytes of SHA-256 over a fixed label and the
// key. Another implementation derives the same id from the same key.
func keyID(key []byte) [keyIDSize]byte {
	h := sha256.Sum256(append([]byte("checkpointd namespace key id v1\x00"), key...))
	var id [keyIDSize]byte
	copy(id[:], h[:keyIDSize])
	return id
}

// ReadNamespaceKeysFile reads --namespace-keys (see ParseNamespaceKeys). Errors name the file and
// the member, never a key.
func ReadNamespaceKeysFile(path string) (*NamespaceKeys, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--namespace-keys: %w", err)
	}
	k, err := ParseNamespaceKeys(data)
	if err != nil {
		return nil, fmt.Errorf("--namespace-keys %s: %w", path, err)
	}
	return k, nil
}

// ParseNamespaceKeys parses a JSON object whose members name a namespace, or "*" for every
// namespace not listed, and whose values are a base64 (standard, padded) 32-byte key or an array of
// them: the first seals new pieces, every one opens what it sealed (keys being rotated out).
func ParseNamespaceKeys(data []byte) (*NamespaceKeys, error) {
	var members map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&members); err != nil {
		return nil, fmt.Errorf("not a JSON object of namespace → key: %w", err)
	}
	if len(members) == 0 {
		return nil, errors.New("no keys: give a key per namespace, or \"*\" for all")
	}
	nk := &NamespaceKeys{current: map[string]*namespaceKey{}, byID: map[[keyIDSize]byte]*namespaceKey{}}
	for ns, raw := range members {
		if ns != defaultKeyName {
			if err := wire.ValidateID(ns); err != nil {
				return nil, fmt.Errorf("namespace %q: %w", ns, err)
			}
		}
		keys, err := decodeKeyList(raw)
		if err != nil {
			return nil, fmt.Errorf("namespace %q: %w", ns, err)
		}
		for i, key := range keys {
			k, err := newNamespaceKey(key)
			if err != nil {
				return nil, fmt.Errorf("namespace %q: key %d: %w", ns, i, err)
			}
			if old, ok := nk.byID[k.id]; ok {
				k = old // the same key under two namespaces (or twice): one entry
			}
			nk.byID[k.id] = k
			if i == 0 {
				nk.current[ns] = k
			}
		}
	}
	return nk, nil
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
		key, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("key %d: not standard base64", i)
		}
		if len(key) != namespaceKeyBytes {
			return nil, fmt.Errorf("key %d: %d bytes, AES-256 needs %d (e.g. openssl rand -base64 32)", i, len(key), namespaceKeyBytes)
		}
		out[i] = key
	}
	return out, nil
}

func newNamespaceKey(key []byte) (*namespaceKey, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &namespaceKey{id: keyID(key), aead: aead}, nil
}

// sealing returns the key new pieces of namespace ns are sealed with, or nil: stored as they are.
func (nk *NamespaceKeys) sealing(ns string) *namespaceKey {
	if nk == nil {
		return nil
	}
	if k, ok := nk.current[ns]; ok {
		return k
	}
	return nk.current[defaultKeyName]
}

// Count is how many distinct keys are held, for the start-up log (which never shows a key).
func (nk *NamespaceKeys) Count() int {
	if nk == nil {
		return 0
	}
	return len(nk.byID)
}

// seal returns the envelope of piece stored under kvKey. The associated data binds the envelope to
// its place (the header and kvKey), so a piece moved to another key, segment or namespace fails to
// open.
func (k *namespaceKey) seal(kvKey string, piece []byte) []byte {
	out := make([]byte, envelopeHeader, envelopeHeader+len(piece)+k.aead.Overhead())
	copy(out, envelopeMagic)
	out[len(envelopeMagic)] = envelopeVersion
	copy(out[len(envelopeMagic)+1:], k.id[:])
	nonce := out[envelopeHeader-nonceSize : envelopeHeader]
	_, _ = rand.Read(nonce) // never fails: crypto/rand crashes the program rather than return short
	return k.aead.Seal(out, bytes.Clone(nonce), piece, associatedData(out[:envelopeHeader], kvKey))
}

func associatedData(header []byte, kvKey string) []byte {
	return append(bytes.Clone(header), kvKey...)
}

// isEnvelope reports whether a stored piece is sealed.
func isEnvelope(stored []byte) bool { return bytes.HasPrefix(stored, []byte(envelopeMagic)) }

// open returns the piece sealed in stored under kvKey, or a SealError.
func (nk *NamespaceKeys) open(ns, kvKey string, stored []byte) ([]byte, error) {
	fail := func(id, reason string) error {
		return &SealError{Namespace: ns, Piece: kvKey, KeyID: id, Reason: reason}
	}
	if len(stored) < EnvelopeOverhead {
		return nil, fail("", fmt.Sprintf("an encrypted piece of %d bytes is shorter than its envelope (%d)", len(stored), EnvelopeOverhead))
	}
	if v := stored[len(envelopeMagic)]; v != envelopeVersion {
		return nil, fail("", fmt.Sprintf("encryption envelope version %d is unknown (this checkpointd reads %d)", v, envelopeVersion))
	}
	var id [keyIDSize]byte
	copy(id[:], stored[len(envelopeMagic)+1:])
	hexID := hex.EncodeToString(id[:])
	var k *namespaceKey
	if nk != nil {
		k = nk.byID[id]
	}
	if k == nil {
		return nil, fail(hexID, fmt.Sprintf("encrypted with key %s, which this checkpointd does not hold (--namespace-keys)", hexID))
	}
	header := stored[:envelopeHeader]
	plain, err := k.aead.Open(nil, header[envelopeHeader-nonceSize:], stored[envelopeHeader:], associatedData(header, kvKey))
	if err != nil {
		return nil, fail(hexID, fmt.Sprintf("does not decrypt with key %s: the stored bytes were altered or moved", hexID))
	}
	return plain, nil
}

// sealPiece is what the Store writes for a piece of a segment of namespace ns under kvKey.
func (s *Store) sealPiece(ns, kvKey string, piece []byte) []byte {
	if k := s.keys.Load().sealing(ns); k != nil {
		return k.seal(kvKey, piece)
	}
	return piece
}

// openPiece returns piece i of a segment from what is stored under kvKey. Piece 0 decides whether
// the segment is sealed (*sealed), since only piece 0 starts with a known magic; the pieces after it
// follow it. A plain segment (written before encryption was turned on) reads as it is.
func (s *Store) openPiece(ns, kvKey string, i int, stored []byte, sealed *bool) ([]byte, error) {
	if i == 0 {
		*sealed = isEnvelope(stored)
	}
	if !*sealed {
		return stored, nil
	}
	return s.keys.Load().open(ns, kvKey, stored)
}

// SetKeys replaces the namespace keys (checkpointd re-reads --namespace-keys on SIGHUP): pieces
// written from then on are sealed with the new file's first keys, and what is stored opens with any
// key it holds. It returns the ids of the keys the new file no longer holds: whatever they sealed
// no longer opens. Encryption cannot be turned on or off while running (the pieces' size leaves room
// for the envelope only when it was on at start): that is an error, and the running keys stay.
func (s *Store) SetKeys(nk *NamespaceKeys) (dropped []string, err error) {
	old := s.keys.Load()
	switch {
	case old == nil && nk != nil:
		return nil, errors.New("--namespace-keys was not set at start: restart checkpointd to turn encryption on")
	case old != nil && nk == nil:
		return nil, errors.New("--namespace-keys is no longer set: restart checkpointd to turn encryption off")
	case old == nil:
		return nil, nil
	}
	for id := range old.byID {
		if _, ok := nk.byID[id]; !ok {
			dropped = append(dropped, hex.EncodeToString(id[:]))
		}
	}
	slices.Sort(dropped)
	s.keys.Store(nk)
	return dropped, nil
}
