// Package snapshot owns the checkpoint domain: sessions and their immutable, monotonic versions, how
// a save becomes the next version (expected-version checks, idempotent save ids, optimistic
// concurrency between several daemons), and how a version is read back and verified. It knows nothing
// of NATS: storage is the Store interface, implemented over JetStream in internal/transfer.
package snapshot

import (
	"context"
	"errors"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Errors a Store reports; implementations map their own errors onto these.
var (
	ErrNotFound         = errors.New("not found")
	ErrRevisionMismatch = errors.New("head revision mismatch")
)

// Store is what the domain needs from storage. Every method is safe for concurrent use, also by
// several processes sharing one store.
type Store interface {
	// Head returns the head version of key and the revision to pass to SwapHead.
	// It returns ErrNotFound if the session has no version yet.
	Head(ctx context.Context, key wire.Key) (wire.Version, uint64, error)
	// SwapHead makes v the head of v.Key if the head is still at revision rev (0: no head yet).
	// It returns ErrRevisionMismatch if another writer moved the head first. This is the commit point
	// of a version.
	SwapHead(ctx context.Context, v wire.Version, rev uint64) error
	// PutVersion indexes an already committed version so that Version finds it. It is idempotent:
	// versions are immutable, and a version already indexed is left as it is.
	PutVersion(ctx context.Context, v wire.Version) error
	// Version returns version n of key from the index, or ErrNotFound.
	Version(ctx context.Context, key wire.Key, n uint64) (wire.Version, error)
	// Versions returns every indexed version of key, oldest first.
	Versions(ctx context.Context, key wire.Key) ([]wire.Version, error)
	// Heads returns the head of every session in namespace ("" for every namespace).
	Heads(ctx context.Context, namespace string) ([]wire.Version, error)

	// StatBlob returns the reference of blob id of namespace if it is stored whole, or ErrNotFound.
	StatBlob(ctx context.Context, namespace, id string) (wire.BlobRef, error)
	// PutBlob stores data as blob id of namespace and returns its reference. Writing the same id twice
	// is harmless: blobs are named by their content.
	PutBlob(ctx context.Context, namespace, id string, rawBytes int64, data []byte) (wire.BlobRef, error)
	// GetBlob returns the stored bytes of a blob, or ErrNotFound.
	GetBlob(ctx context.Context, namespace string, ref wire.BlobRef) ([]byte, error)
}
