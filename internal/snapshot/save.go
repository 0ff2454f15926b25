package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// ErrConflict matches a *ConflictError with errors.Is.
var ErrConflict = errors.New("conflict")

// ConflictError refuses a save whose expected version is not the session's head.
type ConflictError struct {
	Key      wire.Key
	Expected uint64
	Head     uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("session %s: expected to extend version %d, but the head is version %d", e.Key, e.Expected, e.Head)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// SaveRequest is one validated save, ready to become a version.
type SaveRequest struct {
	Key          wire.Key
	SaveID       string  // idempotency key: a save id already at the head is not stored again
	Expected     *uint64 // when set, the head must be this version (0: the session must not exist)
	Writer       string
	Reason       string
	Conversation *codec.Conversation
	Now          time.Time
}

// Saved is the outcome of Save.
type Saved struct {
	Version   wire.Version
	Duplicate bool // the save id was already the head; nothing new was written
}

// maxSwapAttempts bounds the retries when other writers keep moving the head; each retry means
// another version was committed, so the session is making progress.
const maxSwapAttempts = 64

// Save makes req the next version of its session. The commit point is the head swap: a crash before
// it leaves at most an unreferenced blob (harmless, content-addressed), a crash after it leaves the
// version-index entry to be repaired by the next save.
func Save(ctx context.Context, st Store, req SaveRequest) (Saved, error) {
	raw := req.Conversation.Encode()
	sum := sha256.Sum256(raw)
	id := hex.EncodeToString(sum[:])
	var ref *wire.BlobRef

	for attempt := 0; attempt < maxSwapAttempts; attempt++ {
		head, rev, err := st.Head(ctx, req.Key)
		found := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return Saved{}, err
		}
		if found && req.SaveID != "" && head.SaveID == req.SaveID {
			return Saved{Version: head, Duplicate: true}, nil
		}
		if req.Expected != nil && *req.Expected != head.Version {
			return Saved{}, &ConflictError{Key: req.Key, Expected: *req.Expected, Head: head.Version}
		}
		if found {
			// Repair: the previous save may have crashed between its commit and its index write.
			if err := st.PutVersion(ctx, head); err != nil {
				return Saved{}, err
			}
		}
		added := int64(0)
		if ref == nil {
			r, n, err := putBlob(ctx, st, req.Key.Namespace, id, raw)
			if err != nil {
				return Saved{}, err
			}
			ref, added = &r, n
		}
		v := newVersion(req, head.Version, "sha256:"+id, *ref, added, int64(len(raw)))
		switch err := st.SwapHead(ctx, v, rev); {
		case errors.Is(err, ErrRevisionMismatch):
			continue // another writer committed first: look at the new head and try again
		case err != nil:
			return Saved{}, err
		}
		// The version is committed. Should indexing fail, the next save repairs it and reads of the
		// head don't need it, so the save still succeeded.
		_ = st.PutVersion(ctx, v)
		return Saved{Version: v}, nil
	}
	return Saved{}, fmt.Errorf("session %s: head kept moving after %d attempts", req.Key, maxSwapAttempts)
}

// putBlob stores raw as a blob unless an identical one is already there, and returns its reference
// and the bytes this call added to storage.
func putBlob(ctx context.Context, st Store, ns, id string, raw []byte) (wire.BlobRef, int64, error) {
	ref, err := st.StatBlob(ctx, ns, id)
	if err == nil {
		// Same content stored before (a re-save, a revert, another session): reference it.
		return ref, 0, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return wire.BlobRef{}, 0, err
	}
	ref, err = st.PutBlob(ctx, ns, id, int64(len(raw)), codec.EncodeBlob(raw))
	return ref, ref.StoredBytes, err
}

func newVersion(req SaveRequest, headVersion uint64, hash string, ref wire.BlobRef, added, rawBytes int64) wire.Version {
	s := req.Conversation.Stats()
	reason := req.Reason
	if reason == "" {
		reason = wire.ReasonTurn
	}
	return wire.Version{
		Format:      wire.VersionFormat,
		Key:         req.Key,
		Version:     headVersion + 1,
		Parent:      headVersion,
		Hash:        hash,
		SaveID:      req.SaveID,
		Writer:      req.Writer,
		Reason:      reason,
		Created:     req.Now.UTC(),
		RawBytes:    rawBytes,
		StoredBytes: added,
		Counts: wire.Counts{
			Messages: s.Messages, User: s.User, Assistant: s.Assistant,
			ToolResult: s.ToolResult, Extension: s.Extension, ToolCalls: s.ToolCalls,
		},
		Blobs: []wire.BlobRef{ref},
	}
}
