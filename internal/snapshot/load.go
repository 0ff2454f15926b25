package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// ErrCorrupt reports stored bytes that do not match the hash their version recorded.
var ErrCorrupt = errors.New("stored checkpoint does not match its hash")

// GetVersion returns version n of key, or its head when n is 0.
func GetVersion(ctx context.Context, st Store, key wire.Key, n uint64) (wire.Version, error) {
	if n == 0 {
		v, _, err := st.Head(ctx, key)
		return v, err
	}
	v, err := st.Version(ctx, key, n)
	if !errors.Is(err, ErrNotFound) {
		return v, err
	}
	// The newest version is indexed just after its commit; until then the head record has it.
	head, _, herr := st.Head(ctx, key)
	if herr == nil && head.Version == n {
		return head, nil
	}
	return wire.Version{}, err
}

// CheckFormat refuses a version record written in a format this code does not know.
func CheckFormat(v wire.Version) error {
	if v.Format != wire.VersionFormat {
		return fmt.Errorf("version %d of %s: %w", v.Version, v.Key, codec.CheckFormatVersion(v.Format))
	}
	return nil
}

// Read returns the canonical conversation bytes of v, verified against v's hash. A blob may not
// decompress past the size its reference recorded, so a corrupt store cannot exhaust memory.
func Read(ctx context.Context, st Store, v wire.Version) ([]byte, error) {
	if err := CheckFormat(v); err != nil {
		return nil, err
	}
	var out []byte
	for _, ref := range v.Blobs {
		stored, err := st.GetBlob(ctx, v.Key.Namespace, ref)
		if err != nil {
			return nil, fmt.Errorf("version %d of %s: blob %s: %w", v.Version, v.Key, ref.ID, err)
		}
		raw, err := codec.DecodeBlob(stored, ref.RawBytes)
		if err != nil {
			return nil, fmt.Errorf("version %d of %s: blob %s: %w", v.Version, v.Key, ref.ID, err)
		}
		if out == nil && len(v.Blobs) == 1 {
			out = raw
		} else {
			out = append(out, raw...)
		}
	}
	if err := Verify(v, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Verify checks raw against the hash and size v recorded.
func Verify(v wire.Version, raw []byte) error {
	sum := sha256.Sum256(raw)
	want := "sha256:" + hex.EncodeToString(sum[:])
	if int64(len(raw)) != v.RawBytes || want != v.Hash {
		return fmt.Errorf("version %d of %s: %w (have %s, %d bytes; recorded %s, %d bytes)",
			v.Version, v.Key, ErrCorrupt, want, len(raw), v.Hash, v.RawBytes)
	}
	return nil
}
