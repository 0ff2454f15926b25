// Package transfer is everything that moves checkpoints over NATS: the JetStream store behind
// snapshot.Store, the ingest consumer, the request/reply service, and the embedded server.
package transfer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Store keeps versions on JetStream key-value buckets:
//
//	cp_heads     <ns>.<session>.<agent>        → head Version (JSON); its revision is the CAS token
//	cp_versions  <ns>.<session>.<agent>.<n>    → Version n (JSON), written once
//	cp_blobs     <ns>.<blob id>.<i>            → piece i of a stored blob
//	             <ns>.<blob id>.m              → the blob's BlobRef (JSON), written after every piece
//
// Ids are encoded with wire.EncodeID, so no user string can change what a key means.
type Store struct {
	heads, versions, blobs jetstream.KeyValue
	chunkSize              int
}

var _ snapshot.Store = (*Store)(nil)

// StoreConfig sets up the buckets.
type StoreConfig struct {
	Replicas int // JetStream replicas of each bucket (1 on a single server, 3 in a cluster)
	// ChunkSize is the largest piece a blob is cut into; it must fit the server's max_payload.
	ChunkSize int
}

// OpenStore creates the buckets if they are missing and returns a Store over them.
func OpenStore(ctx context.Context, js jetstream.JetStream, cfg StoreConfig) (*Store, error) {
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	if cfg.ChunkSize <= 0 {
		return nil, errors.New("store: chunk size must be positive")
	}
	s := &Store{chunkSize: cfg.ChunkSize}
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
		desc string
	}{
		{&s.heads, wire.BucketHeads, "checkpointd: head version of each session"},
		{&s.versions, wire.BucketVersion, "checkpointd: every version record"},
		{&s.blobs, wire.BucketBlobs, "checkpointd: compressed conversation blobs"},
	} {
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      b.name,
			Description: b.desc,
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("store: bucket %s: %w", b.name, err)
		}
		*b.kv = kv
	}
	return s, nil
}

func versionKey(k wire.Key, n uint64) string { return k.Token() + "." + strconv.FormatUint(n, 10) }

func blobKey(ns, id, part string) string { return wire.EncodeID(ns) + "." + id + "." + part }

// Head implements snapshot.Store.
func (s *Store) Head(ctx context.Context, key wire.Key) (wire.Version, uint64, error) {
	e, err := s.heads.Get(ctx, key.Token())
	if err != nil {
		return wire.Version{}, 0, mapKVErr(err)
	}
	v, err := decodeVersion(e.Value())
	return v, e.Revision(), err
}

// SwapHead implements snapshot.Store.
func (s *Store) SwapHead(ctx context.Context, v wire.Version, rev uint64) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = s.heads.Create(ctx, v.Key.Token(), data)
	} else {
		_, err = s.heads.Update(ctx, v.Key.Token(), data, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return snapshot.ErrRevisionMismatch
	}
	return err
}

// PutVersion implements snapshot.Store.
func (s *Store) PutVersion(ctx context.Context, v wire.Version) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = s.versions.Create(ctx, versionKey(v.Key, v.Version), data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil // versions are immutable: the one there is this one
	}
	return err
}

// Version implements snapshot.Store.
func (s *Store) Version(ctx context.Context, key wire.Key, n uint64) (wire.Version, error) {
	e, err := s.versions.Get(ctx, versionKey(key, n))
	if err != nil {
		return wire.Version{}, mapKVErr(err)
	}
	return decodeVersion(e.Value())
}

// Versions implements snapshot.Store.
func (s *Store) Versions(ctx context.Context, key wire.Key) ([]wire.Version, error) {
	vs, err := watchAll(ctx, s.versions, key.Token()+".*")
	slices.SortFunc(vs, func(a, b wire.Version) int { return cmp.Compare(a.Version, b.Version) })
	return vs, err
}

// Heads implements snapshot.Store.
func (s *Store) Heads(ctx context.Context, namespace string) ([]wire.Version, error) {
	filter := ">"
	if namespace != "" {
		filter = wire.EncodeID(namespace) + ".>"
	}
	return watchAll(ctx, s.heads, filter)
}

// StatBlob implements snapshot.Store.
func (s *Store) StatBlob(ctx context.Context, ns, id string) (wire.BlobRef, error) {
	e, err := s.blobs.Get(ctx, blobKey(ns, id, "m"))
	if err != nil {
		return wire.BlobRef{}, mapKVErr(err)
	}
	var ref wire.BlobRef
	if err := json.Unmarshal(e.Value(), &ref); err != nil {
		return wire.BlobRef{}, fmt.Errorf("blob %s: manifest: %w", id, err)
	}
	return ref, nil
}

// PutBlob implements snapshot.Store. The manifest goes last, so a blob is visible to StatBlob only
// once every piece is stored.
func (s *Store) PutBlob(ctx context.Context, ns, id string, rawBytes int64, data []byte) (wire.BlobRef, error) {
	ref := wire.BlobRef{ID: id, RawBytes: rawBytes, StoredBytes: int64(len(data))}
	for off := 0; off < len(data) || ref.Chunks == 0; off += s.chunkSize {
		end := min(off+s.chunkSize, len(data))
		if _, err := s.blobs.Put(ctx, blobKey(ns, id, strconv.Itoa(ref.Chunks)), data[off:end]); err != nil {
			return wire.BlobRef{}, fmt.Errorf("blob %s: piece %d: %w", id, ref.Chunks, err)
		}
		ref.Chunks++
	}
	manifest, err := json.Marshal(ref)
	if err != nil {
		return wire.BlobRef{}, err
	}
	if _, err := s.blobs.Put(ctx, blobKey(ns, id, "m"), manifest); err != nil {
		return wire.BlobRef{}, fmt.Errorf("blob %s: manifest: %w", id, err)
	}
	return ref, nil
}

// GetBlob implements snapshot.Store.
func (s *Store) GetBlob(ctx context.Context, ns string, ref wire.BlobRef) ([]byte, error) {
	out := make([]byte, 0, ref.StoredBytes)
	for i := 0; i < ref.Chunks; i++ {
		e, err := s.blobs.Get(ctx, blobKey(ns, ref.ID, strconv.Itoa(i)))
		if err != nil {
			return nil, fmt.Errorf("piece %d of %d: %w", i, ref.Chunks, mapKVErr(err))
		}
		out = append(out, e.Value()...)
	}
	if int64(len(out)) != ref.StoredBytes {
		return nil, fmt.Errorf("%w: blob %s is %d bytes, its manifest says %d", snapshot.ErrCorrupt, ref.ID, len(out), ref.StoredBytes)
	}
	return out, nil
}

// watchAll returns the current value of every key matching filter.
func watchAll(ctx context.Context, kv jetstream.KeyValue, filter string) ([]wire.Version, error) {
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var out []wire.Version
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e := <-w.Updates():
			if e == nil { // the initial values are all delivered
				return out, nil
			}
			v, err := decodeVersion(e.Value())
			if err != nil {
				return nil, fmt.Errorf("key %s: %w", e.Key(), err)
			}
			out = append(out, v)
		}
	}
}

func decodeVersion(data []byte) (wire.Version, error) {
	var v wire.Version
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("%w: version record: %v", snapshot.ErrCorrupt, err)
	}
	return v, nil
}

func mapKVErr(err error) error {
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return snapshot.ErrNotFound
	}
	return err
}
