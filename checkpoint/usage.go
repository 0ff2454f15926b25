package checkpoint

import "context"

// SessionUsage is what one session (one agent of it) holds, as its version records tell.
type SessionUsage struct {
	Key Key `json:"key"`
	// Versions is how many versions the session keeps; Head is the newest.
	Versions int    `json:"versions"`
	Head     uint64 `json:"head"`
	// RawBytes is the size of the head's conversation as canonical JSON: what a restore returns.
	RawBytes int64 `json:"rawBytes"`
	// StoredBytes is the sum of StoredBytes over the versions kept: the compressed bytes their saves
	// added to storage. Messages first stored by a version since pruned, and still used by later
	// ones, are not counted; an image shared with other sessions counts where it was first stored.
	StoredBytes int64 `json:"storedBytes"`
}

// Usage reads a session's history and sums what its versions hold (one history request, paged).
// It is the live size the daemon records per version, not the bytes JetStream keeps on disk (for
// those, the daemon's metrics).
func (c *Client) Usage(ctx context.Context, key Key) (SessionUsage, error) {
	versions, err := c.History(ctx, key)
	if err != nil {
		return SessionUsage{}, err
	}
	return usageOf(key.WithDefaults(), versions), nil
}

// usageOf sums versions, oldest first, of key.
func usageOf(key Key, versions []Version) SessionUsage {
	u := SessionUsage{Key: key, Versions: len(versions)}
	for _, v := range versions {
		u.StoredBytes += v.StoredBytes
	}
	if n := len(versions); n > 0 {
		u.Head, u.RawBytes = versions[n-1].Version, versions[n-1].RawBytes
	}
	return u
}
