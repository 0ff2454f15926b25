package snapshot

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// Archive is a compressed batch of version records: those from From to To, as one segment whose raw
// bytes are a JSON array of records. A record costs ~570 bytes as its own key-value entry and ~50
// inside an archive, which matters when a session has a version per turn.
type Archive struct {
	From    uint64     `json:"from"`
	To      uint64     `json:"to"`
	Segment SegmentRef `json:"segment"`
}

// readArchive returns the records of an archive.
func readArchive(ctx context.Context, st Store, key Key, a Archive, cache SegmentCache) ([]Version, error) {
	raw, err := readSegment(ctx, st, key, a.Segment, cache)
	if err != nil {
		return nil, err
	}
	var recs []Version
	if err := json.Unmarshal(raw, &recs); err != nil {
		return nil, fmt.Errorf("%w: archive of versions %d-%d: %v", ErrCorrupt, a.From, a.To, err)
	}
	return recs, nil
}

// History returns every version of a session, oldest first: archived, indexed, and the head.
func History(ctx context.Context, st Store, key Key) ([]Version, error) {
	for attempt := 0; ; attempt++ {
		all, complete, err := history(ctx, st, key)
		if err != nil || complete || attempt == 2 {
			return all, err
		}
		// Records moved from the index into a new archive between our reads: read again.
	}
}

func history(ctx context.Context, st Store, key Key) ([]Version, bool, error) {
	head, _, err := st.Head(ctx, key)
	if err != nil {
		return nil, false, err
	}
	if !head.Exists() {
		return nil, false, fmt.Errorf("%w: the session is leased but has no version yet", ErrNotFound)
	}
	var all []Version
	for _, a := range head.Archives {
		recs, err := readArchive(ctx, st, key, a, nil)
		if errors.Is(err, ErrNotFound) {
			return nil, false, nil // replaced by a newer archive meanwhile
		}
		if err != nil {
			return nil, false, err
		}
		all = append(all, recs...)
	}
	indexed, err := st.Versions(ctx, key)
	if err != nil {
		return nil, false, err
	}
	all = append(append(all, indexed...), head.Version)
	// Records of pruned versions may linger in the index for a moment after a prune.
	all = slices.DeleteFunc(all, func(v Version) bool { return v.Version < head.first() })
	slices.SortFunc(all, func(a, b Version) int { return cmp.Compare(a.Version, b.Version) })
	all = slices.CompactFunc(all, func(a, b Version) bool { return a.Version == b.Version })
	return all, uint64(len(all)) == head.Version.Version-head.first()+1, nil
}

// findVersion looks for version n among the head's archives.
func findVersion(ctx context.Context, st Store, head Head, n uint64, cache SegmentCache) (Version, error) {
	for _, a := range head.Archives {
		if n < a.From || n > a.To {
			continue
		}
		raw, err := readSegment(ctx, st, head.Key, a.Segment, cache)
		if err != nil {
			return Version{}, err
		}
		if v, ok, err := recordIn(raw, n); err != nil || ok {
			if err != nil {
				err = fmt.Errorf("%w: archive of versions %d-%d: %v", ErrCorrupt, a.From, a.To, err)
			}
			return v, err
		}
	}
	return Version{}, ErrNotFound
}

// recordIn finds version n in the raw bytes of an archive (a compact JSON array of records, oldest
// first) without decoding the others: a binary search that decodes only the records it looks at.
func recordIn(raw []byte, n uint64) (Version, bool, error) {
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return Version{}, false, errors.New("not a JSON array")
	}
	recs := codec.SplitCanonical(raw[1 : len(raw)-1])
	var bad error
	i, found := sort.Find(len(recs), func(i int) int {
		var probe struct {
			Version uint64 `json:"version"`
		}
		if err := json.Unmarshal(recs[i], &probe); err != nil && bad == nil {
			bad = err
		}
		return cmp.Compare(n, probe.Version)
	})
	if bad != nil || !found {
		return Version{}, false, bad
	}
	var v Version
	return v, true, json.Unmarshal(recs[i], &v)
}
