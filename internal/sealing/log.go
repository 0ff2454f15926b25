package sealing

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/pieces"
)

// Log is an engine.Log that seals what the engine stores of a namespace with a key (docs/format.md
// §8.12a): every entry's data and every value are sealed on their way to the inner log, and opened
// on their way back; the engine never sees an envelope. Sessions, sequences, the namespace index
// and value ids pass through unchanged: they are the inner log's subjects and order.
//
// Data of a namespace without a key (and no "*") is stored plain. A plain entry or value read in a
// namespace that has a key is returned as it is, as format 2 does: it was written before the key
// was set (encryption protects confidentiality, not integrity against whoever can write the store;
// docs/security.md).
type Log struct {
	inner engine.Log
	keys  atomic.Pointer[Keys]
}

var _ engine.Log = (*Log)(nil)

// ErrLooksSealed refuses plain data (of a namespace without a key) that starts with the envelope's
// magic: it would read back as an envelope. The engine never writes such data (entries start with
// "CPL", values are zstd frames); this guards the Log's contract for any other caller.
var ErrLooksSealed = errors.New("plain data starts with the encryption envelope's magic (CPKE)")

// NewLog returns inner with the namespaces keys has a key for sealed. keys may be nil: everything
// is stored plain and envelopes do not open (SealError); SetKeys cannot turn sealing on later.
func NewLog(inner engine.Log, keys *Keys) *Log {
	l := &Log{inner: inner}
	l.keys.Store(keys)
	return l
}

// Keys returns the keys in force.
func (l *Log) Keys() *Keys { return l.keys.Load() }

// SetKeys puts keys read again (SIGHUP) in force: data written from then on is sealed with their
// first keys, and what is stored opens with any key they hold. It returns the ids of the keys no
// longer held: whatever they sealed no longer opens (nothing refuses this; the daemon logs it as a
// warning). Turning sealing on or off (nil ↔ keys) is refused and the running keys stay, the
// rule format 2 has (CheckReload): the daemon wraps its log in a Log only when --namespace-keys is
// set at start, and a reload that turned sealing off would leave everything sealed unreadable.
func (l *Log) SetKeys(keys *Keys) (dropped []string, err error) {
	for {
		old := l.keys.Load()
		if dropped, err = CheckReload(old, keys); err != nil {
			return nil, err
		}
		if l.keys.CompareAndSwap(old, keys) { // else another reload came first: check against it
			return dropped, nil
		}
	}
}

// MaxEntry leaves room for the envelope, whether or not the namespace has a key: the engine sizes
// its entries before it knows, and a key may be added for a namespace by a reload.
func (l *Log) MaxEntry() int {
	return int(pieces.Size(int64(l.inner.MaxEntry()), int64(EnvelopeOverhead)))
}

// The associated data that binds sealed bytes to their place (after the envelope's header): a
// label, then each id as a varint length and its bytes. An entry is bound to its log (namespace,
// session, agent), not to its sequence, which is given out by the store after the data is sealed;
// a value to its namespace and id. The labels hold a space and a NUL, which no format-2 place (a
// cp_segments key, of encoded ids) holds, so no envelope of one format opens as the other's.
const (
	entryLabel = "CPL entry\x00"
	valueLabel = "CPL value\x00"
)

func entryPlace(k engine.Key) []byte { return place(entryLabel, k.Namespace, k.Session, k.Agent) }

func valuePlace(ns, id string) []byte { return place(valueLabel, ns, id) }

func place(label string, ids ...string) []byte {
	n := len(label)
	for _, id := range ids {
		n += binary.MaxVarintLen64 + len(id)
	}
	b := append(make([]byte, 0, n), label...)
	for _, id := range ids {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
	}
	return b
}

// entryWhat and valueWhat name stored data in errors.
func entryWhat(k engine.Key, seq uint64) string {
	return fmt.Sprintf("log entry %d of session %q agent %q", seq, k.Session, k.Agent)
}

func valueWhat(id string) string { return fmt.Sprintf("value %q", id) }

// seal returns what to store for data of namespace ns at place: its envelope, or data itself when
// ns has no key.
func (l *Log) seal(ns string, place, data []byte, what func() string) ([]byte, error) {
	if max := l.MaxEntry(); len(data) > max {
		return nil, fmt.Errorf("namespace %q: %s: %d bytes: %w (max %d with the encryption envelope)", ns, what(), len(data), engine.ErrTooLarge, max)
	}
	stored, sealed := l.keys.Load().Seal(ns, place, data)
	if !sealed && IsEnvelope(data) {
		return nil, fmt.Errorf("namespace %q: %s: %w", ns, what(), ErrLooksSealed)
	}
	return stored, nil
}

// open returns the data stored at place: opened if it is an envelope, else as it is.
func (l *Log) open(ns string, place, stored []byte, what func() string) ([]byte, error) {
	if !IsEnvelope(stored) {
		return stored, nil
	}
	return l.keys.Load().Open(ns, place, what(), stored)
}

func (l *Log) Append(ctx context.Context, key engine.Key, data []byte, after uint64) (uint64, error) {
	stored, err := l.seal(key.Namespace, entryPlace(key), data, func() string {
		return fmt.Sprintf("log entry after %d of session %q agent %q", after, key.Session, key.Agent)
	})
	if err != nil {
		return 0, err
	}
	return l.inner.Append(ctx, key, stored, after)
}

// openEntry opens e, an entry of key's log.
func (l *Log) openEntry(key engine.Key, place []byte, e engine.Entry) (engine.Entry, error) {
	data, err := l.open(key.Namespace, place, e.Data, func() string { return entryWhat(key, e.Seq) })
	if err != nil {
		return engine.Entry{}, err
	}
	return engine.Entry{Seq: e.Seq, Data: data}, nil
}

func (l *Log) Last(ctx context.Context, key engine.Key) (engine.Entry, error) {
	e, err := l.inner.Last(ctx, key)
	if err != nil {
		return e, err
	}
	return l.openEntry(key, entryPlace(key), e)
}

// Lasts opens each entry (a key with an empty log keeps its Entry of Seq 0) and fails with the
// SealError of the first that does not open.
func (l *Log) Lasts(ctx context.Context, keys []engine.Key) ([]engine.Entry, error) {
	es, err := l.inner.Lasts(ctx, keys)
	if err != nil {
		return nil, err
	}
	for i, e := range es {
		if e.Seq == 0 {
			continue
		}
		if es[i], err = l.openEntry(keys[i], entryPlace(keys[i]), e); err != nil {
			return nil, err
		}
	}
	return es, nil
}

// Moved reads no data: nothing to open.
func (l *Log) Moved(ctx context.Context, key engine.Key, seq uint64) (bool, error) {
	return l.inner.Moved(ctx, key, seq)
}

func (l *Log) Get(ctx context.Context, key engine.Key, seq uint64) (engine.Entry, error) {
	e, err := l.inner.Get(ctx, key, seq)
	if err != nil {
		return e, err
	}
	return l.openEntry(key, entryPlace(key), e)
}

// Range stops at the first entry that does not open and returns its SealError.
func (l *Log) Range(ctx context.Context, key engine.Key, from, upTo uint64, fn func(engine.Entry) bool) error {
	place := entryPlace(key)
	var openErr error
	err := l.inner.Range(ctx, key, from, upTo, func(e engine.Entry) bool {
		e, openErr = l.openEntry(key, place, e)
		return openErr == nil && fn(e)
	})
	if openErr != nil {
		return openErr
	}
	return err
}

func (l *Log) PutValue(ctx context.Context, ns, id string, blob []byte) error {
	stored, err := l.seal(ns, valuePlace(ns, id), blob, func() string { return valueWhat(id) })
	if err != nil {
		return err
	}
	return l.inner.PutValue(ctx, ns, id, stored)
}

func (l *Log) Value(ctx context.Context, ns, id string) ([]byte, error) {
	stored, err := l.inner.Value(ctx, ns, id)
	if err != nil {
		return nil, err
	}
	return l.open(ns, valuePlace(ns, id), stored, func() string { return valueWhat(id) })
}

// What is not sealed passes through: deletions, the namespace index, value ids.

func (l *Log) Delete(ctx context.Context, key engine.Key, seqs ...uint64) error {
	return l.inner.Delete(ctx, key, seqs...)
}

func (l *Log) Purge(ctx context.Context, key engine.Key) error { return l.inner.Purge(ctx, key) }

func (l *Log) Sessions(ctx context.Context, ns string, cursor uint64, limit int) ([]engine.Key, uint64, error) {
	return l.inner.Sessions(ctx, ns, cursor, limit)
}

func (l *Log) Namespaces(ctx context.Context) ([]string, error) { return l.inner.Namespaces(ctx) }

func (l *Log) Values(ctx context.Context, ns string, fn func(id string) bool) error {
	return l.inner.Values(ctx, ns, fn)
}

func (l *Log) DeleteValue(ctx context.Context, ns, id string) error {
	return l.inner.DeleteValue(ctx, ns, id)
}
