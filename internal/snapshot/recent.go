package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
)

// A save can be delivered again after later versions of its session were committed: the daemon
// that settled it died before acknowledging it, the writer retried it while no daemon ran (a
// restarted server forgets which message ids it saw), and the session moved on meanwhile. The
// result on CP_RESULTS names its version, but a killed server can lose that write even after
// acknowledging it, so the duplicate must be recognised from what the commit itself wrote: each
// head lists the save ids of the versions before it, hashed, up to recentSaves of them.

// recentSaves is how many earlier save ids a head keeps: far more versions than one session's
// writers commit while a redelivery waits (the ingest consumer's ack wait, seconds).
const recentSaves = 32

// recentEntry is "<version>:<first 12 hex digits of the SHA-256 of the save id>" (20-odd bytes).
func recentEntry(version uint64, saveID string) string {
	sum := sha256.Sum256([]byte(saveID))
	return strconv.FormatUint(version, 10) + ":" + hex.EncodeToString(sum[:6])
}

// remember returns the Recent list of the version that follows head: head's own save id added.
func remember(head Head) []string {
	if !head.Exists() || head.SaveID == "" {
		return head.Recent
	}
	recent := append(head.Recent[max(len(head.Recent)+1-recentSaves, 0):len(head.Recent):len(head.Recent)],
		recentEntry(head.Version.Version, head.SaveID))
	return recent
}

// savedRecently finds the version saveID made among the ones head remembers. The hash only points
// at a version: its record must carry the save id itself.
func savedRecently(ctx context.Context, st Store, head Head, saveID string) (Version, bool, error) {
	if saveID == "" {
		return Version{}, false, nil
	}
	suffix := recentEntry(0, saveID)[1:] // ":<hash>"
	for i := len(head.Recent) - 1; i >= 0; i-- {
		e := head.Recent[i]
		if !strings.HasSuffix(e, suffix) {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(e, suffix), 10, 64)
		if err != nil {
			continue
		}
		v, err := GetVersion(ctx, st, head.Key, n, nil)
		if errors.Is(err, ErrNotFound) {
			continue // pruned since
		}
		if err != nil {
			return Version{}, false, err
		}
		if v.SaveID == saveID {
			return v, true, nil
		}
	}
	return Version{}, false, nil
}
