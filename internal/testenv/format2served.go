package testenv

import (
	"context"

	"github.com/checkpointd/checkpointd/checkpoint"
)

// Served is what the format-2 comparison reads: a daemon through the public client
// (ClientServed), or a store read directly by a test that has no daemon serving it yet (the
// upgrade's tests read the log engine itself, internal/upgrade).
type Served interface {
	// ListAll returns the head of every listed session of every namespace.
	ListAll(ctx context.Context) ([]checkpoint.Session, error)
	// LeaseStatus returns the session's lease (epoch 0: never leased).
	LeaseStatus(ctx context.Context, key checkpoint.Key) (checkpoint.LeaseInfo, error)
	// History returns the records of the versions kept, oldest first (checkpoint.ErrNotFound:
	// none).
	History(ctx context.Context, key checkpoint.Key) ([]checkpoint.Version, error)
	// Restore returns a version's conversation, checked against its record's hash and size.
	Restore(ctx context.Context, key checkpoint.Key, version uint64) ([]byte, error)
	// Get returns a version's record (0: the head), or checkpoint.ErrNotFound.
	Get(ctx context.Context, key checkpoint.Key, version uint64) (checkpoint.Version, error)
}

// ClientServed is what c's daemon serves.
func ClientServed(c *checkpoint.Client) Served { return clientServed{c} }

type clientServed struct{ *checkpoint.Client }

func (c clientServed) Restore(ctx context.Context, key checkpoint.Key, version uint64) ([]byte, error) {
	conv, _, err := c.Client.Restore(ctx, key, version)
	return conv, err
}

// WithoutStorageFacts is a record without the fields that say how it is stored rather than what
// the version is: storedBytes (the compressed bytes its save wrote) and gen (format 2's storage
// generation). An upgrade to another storage engine writes every version again, in its own way:
// these two are the only record fields it changes (docs/format.md §8.17).
func WithoutStorageFacts(v checkpoint.Version) checkpoint.Version {
	v.StoredBytes, v.Gen = 0, 0
	return v
}

// CompareFormat2Upgraded is CompareFormat2 on a store upgraded from the manifest's: every
// record is compared without its storage facts (WithoutStorageFacts), everything else exactly.
func CompareFormat2Upgraded(ctx context.Context, s Served, m Format2Manifest) error {
	return compareFormat2(ctx, s, m, WithoutStorageFacts)
}
