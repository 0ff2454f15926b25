package transfer

import (
	"github.com/checkpointd/checkpointd/internal/sealing"
)

// checkpointd-side encryption of stored conversation bytes, for clusters whose operator must not
// read them (--namespace-keys). It works at the storage edge: the log the engine writes to is
// wrapped by internal/sealing (edge.SealLog), which seals every entry's data and every value with
// AES-256-GCM under its namespace's key and opens them when read; the engine never sees it.
// docs/format.md §8.12a specifies it; docs/security.md says what it protects and what it does not.
// These names keep the daemon's Config and cmd/checkpointd free of internal/sealing's.

// NamespaceKeys holds the keys of --namespace-keys (sealing.Keys): per namespace, the key new
// pieces are sealed with, plus older keys that still open what they sealed.
type NamespaceKeys = sealing.Keys

// ReadNamespaceKeysFile reads --namespace-keys (sealing.ReadKeysFile).
func ReadNamespaceKeysFile(path string) (*NamespaceKeys, error) { return sealing.ReadKeysFile(path) }

// ParseNamespaceKeys parses the keys file's bytes (sealing.ParseKeys).
func ParseNamespaceKeys(data []byte) (*NamespaceKeys, error) { return sealing.ParseKeys(data) }
