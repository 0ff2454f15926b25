package checkpoint

import (
	"bytes"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// redactImagePaths applies the daemon's "redact" image-path policy (docs/format.md §1) to a
// version about to be exported: each image member naming a local file becomes
// "redacted:local-file" plus its extension. The record then describes the redacted conversation
// (hash and size), so the bundle verifies on its own; its hashes differ from the source's.
func redactImagePaths(conv []byte, rec Version) ([]byte, Version, error) {
	c, err := codec.ParseLimited(conv, codec.Limits{ImagePaths: codec.ImagePathsRedact, Dialect: rec.Dialect})
	if err != nil {
		return nil, rec, fmt.Errorf("redacting image paths of version %d of %s: %w", rec.Version, rec.Key, err)
	}
	out := c.Encode()
	if bytes.Equal(out, conv) {
		return conv, rec, nil
	}
	rec.Hash, rec.RawBytes = wire.Hash(out), int64(len(out))
	return out, rec, nil
}
