// Package snapshot is format 2, the checkpoint domain checkpointd ran on before the log engine
// (internal/engine, docs/format.md §8): sessions kept in five KV buckets through the Store interface,
// implemented over JetStream in internal/snapshot/kvstore. The daemon no longer writes it; only
// internal/upgrade reads it, to copy a store of format 2 into the log engine at start-up (§8.17),
// and its tests write it to have something to upgrade. It knows nothing of NATS, nor of the
// protocol (internal/wire): the records it stores are its own, frozen as format 2 wrote them
// (record.go).
package snapshot

import (
	"context"
	"errors"
	"io"
)

// Errors a Store reports; implementations map their own errors onto these.
var (
	ErrNotFound         = errors.New("not found")
	ErrRevisionMismatch = errors.New("head revision mismatch")
)

// Store is what the domain needs from storage. Every method is safe for concurrent use, also by
// several processes sharing one store.
type Store interface {
	// Head returns the head of key and the revision to pass to SwapHead, or ErrNotFound.
	Head(ctx context.Context, key Key) (Head, uint64, error)
	// SwapHead makes h the head of h.Key if the head is still at revision rev (0: no head yet), or
	// returns ErrRevisionMismatch. It is the commit point of a version, and of a compaction.
	SwapHead(ctx context.Context, h Head, rev uint64) error

	// PutVersion indexes a committed version so that Version finds it. Versions are immutable, so
	// it is idempotent: a version already indexed is left as it is.
	PutVersion(ctx context.Context, v Version) error
	// Version returns version n of key from the index, or ErrNotFound.
	Version(ctx context.Context, key Key, n uint64) (Version, error)
	// Versions returns every indexed version of key, oldest first.
	Versions(ctx context.Context, key Key) ([]Version, error)

	// PutLayout keeps the layout of a generation that is no longer the head's.
	PutLayout(ctx context.Context, l Layout) error
	// Layout returns the kept layout of generation gen of key, or ErrNotFound.
	Layout(ctx context.Context, key Key, gen uint64) (Layout, error)

	// PutSegment stores a new segment's blob (codec.EncodeBlob of its raw bytes) and returns its
	// reference, with Chunks filled in.
	PutSegment(ctx context.Context, key Key, ref SegmentRef, blob []byte) (SegmentRef, error)
	// GetSegment returns a segment's blob, or ErrNotFound.
	GetSegment(ctx context.Context, key Key, ref SegmentRef) ([]byte, error)
	// OpenSegment returns a reader of a segment's blob that fetches its pieces one at a time, so
	// that a large segment is never held whole; a missing segment reads as ErrNotFound.
	OpenSegment(ctx context.Context, key Key, ref SegmentRef) io.Reader
	// PutSegmentFrom stores a new segment's blob read from r, piece by piece, and returns its
	// reference with Chunks and StoredBytes filled in.
	PutSegmentFrom(ctx context.Context, key Key, ref SegmentRef, r io.Reader) (SegmentRef, error)
	// DeleteSegment removes a segment no layout refers to any more.
	DeleteSegment(ctx context.Context, key Key, ref SegmentRef) error

	// ValueEntry returns the entry of value id of namespace ns and the revision to pass to
	// SwapValueEntry, or ErrNotFound.
	ValueEntry(ctx context.Context, ns, id string) (ValueEntry, uint64, error)
	// SwapValueEntry writes e if its entry is still at revision rev (0: none yet) and returns the
	// new revision, or ErrRevisionMismatch.
	SwapValueEntry(ctx context.Context, e ValueEntry, rev uint64) (uint64, error)

	// DeleteSession removes the head of key if it is still at revision rev (else
	// ErrRevisionMismatch), or replaces it with keep when that is set, then every version record,
	// layout and segment stored under key.
	DeleteSession(ctx context.Context, key Key, rev uint64, keep *Head) error
}
