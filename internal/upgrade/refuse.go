package upgrade

import (
	"errors"
	"fmt"
)

// ErrRefused: the store holds format 2, and the daemon was told not to upgrade it
// (--no-upgrade).
var ErrRefused = errors.New("this store holds format 2 and --no-upgrade forbids upgrading it")

// Refusal is the error a daemon started with --no-upgrade returns when Needed says the store
// (its data directory, or the cluster at url) holds format 2: it says how to upgrade in place, or
// how to move the data by hand with the export/import commands. where names the store in the
// message (the data directory or the server's URL).
func Refusal(where string) error {
	return fmt.Errorf(`%w: %s holds checkpoints in format 2 (the JetStream KV buckets cp_heads, cp_versions, cp_layouts, cp_segments, cp_values), which this checkpointd does not serve. Either:
  - start checkpointd without --no-upgrade: it copies every session (versions, records, leases, moved marks) into the new format in place before it serves, and deletes the buckets only once the copy is complete and checked; a kill at any point leaves the old format or the new one, and the next start goes on (docs/format.md §8.17); or
  - move the data by hand: run the previous checkpointd release on %s and export everything with its checkpointctl:
        checkpointctl export -A --file all.cpbundle
    then start this checkpointd on an empty data directory (or another cluster) and import it:
        checkpointctl import all.cpbundle
    (a bundle holds every version with its record and hash; leases are not in it: writers acquire them again)`, ErrRefused, where, where)
}
