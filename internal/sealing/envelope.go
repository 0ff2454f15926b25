package sealing

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// The envelope (docs/format.md §6): magic, version, key id, nonce, then the GCM ciphertext and
// tag. The GCM associated data is the 25 header bytes followed by the place the bytes are stored
// at, which the caller names: format 2 a piece's key in cp_segments, the log engine an entry's
// session or a value's id (log.go). Bytes moved to another place do not open.
const (
	envelopeMagic   = "CPKE" // never the start of a format-2 piece 0 ("CPKT"), a CPL entry or a zstd frame
	envelopeVersion = 1
	keyIDSize       = 8
	nonceSize       = 12
	envelopeHeader  = len(envelopeMagic) + 1 + keyIDSize + nonceSize
	tagSize         = 16
	// EnvelopeOverhead is what sealing adds to the bytes it seals (41).
	EnvelopeOverhead = envelopeHeader + tagSize
)

// SealError reports stored bytes that cannot be opened: sealed with a key this daemon does not
// hold, or that do not authenticate under the key named (a wrong key with the same id is
// impossible, so: altered or moved bytes). It matches engine.ErrCorrupt (format 2's Store makes it
// match snapshot.ErrCorrupt too), so a read answers code "corrupt" and never returns the bytes. It
// names the key by its id, never the bytes.
type SealError struct {
	Namespace string
	Place     string // what was read: "stored piece <key>", "log entry 42 of session …", "value …"
	KeyID     string // hex; empty when the envelope is unreadable before its key id
	Reason    string
}

func (e *SealError) Error() string {
	return fmt.Sprintf("namespace %q: %s: %s", e.Namespace, e.Place, e.Reason)
}

// Is makes a SealError an engine.ErrCorrupt.
func (e *SealError) Is(target error) bool { return target == engine.ErrCorrupt }

// IsEnvelope reports whether stored bytes are sealed: they start with the envelope's magic.
func IsEnvelope(stored []byte) bool { return bytes.HasPrefix(stored, []byte(envelopeMagic)) }

// Seal returns plain sealed in an envelope with namespace ns's sealing key, bound to place, and
// true; or plain itself and false when ns has no key (it is then stored as it is).
func (ks *Keys) Seal(ns string, place, plain []byte) ([]byte, bool) {
	k := ks.sealing(ns)
	if k == nil {
		return plain, false
	}
	return k.seal(place, plain), true
}

func (k *key) seal(place, plain []byte) []byte {
	out := make([]byte, envelopeHeader, envelopeHeader+len(plain)+k.aead.Overhead())
	copy(out, envelopeMagic)
	out[len(envelopeMagic)] = envelopeVersion
	copy(out[len(envelopeMagic)+1:], k.id[:])
	nonce := out[envelopeHeader-nonceSize : envelopeHeader]
	_, _ = rand.Read(nonce) // never fails: crypto/rand crashes the program rather than return short
	return k.aead.Seal(out, bytes.Clone(nonce), plain, associatedData(out[:envelopeHeader], place))
}

func associatedData(header, place []byte) []byte {
	return append(bytes.Clone(header), place...)
}

// Open returns the bytes sealed in stored (an envelope: IsEnvelope) at place, or a *SealError
// naming namespace ns and what (the place, said for people).
func (ks *Keys) Open(ns string, place []byte, what string, stored []byte) ([]byte, error) {
	fail := func(id, reason string) error {
		return &SealError{Namespace: ns, Place: what, KeyID: id, Reason: reason}
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
	var k *key
	if ks != nil {
		k = ks.byID[id]
	}
	if k == nil {
		return nil, fail(hexID, fmt.Sprintf("encrypted with key %s, which this checkpointd does not hold (--namespace-keys)", hexID))
	}
	header := stored[:envelopeHeader]
	plain, err := k.aead.Open(nil, header[envelopeHeader-nonceSize:], stored[envelopeHeader:], associatedData(header, place))
	if err != nil {
		return nil, fail(hexID, fmt.Sprintf("does not decrypt with key %s: the stored bytes were altered or moved", hexID))
	}
	return plain, nil
}
