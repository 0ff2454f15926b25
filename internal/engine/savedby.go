package engine

import (
	"context"
	"fmt"
)

// SavedBy returns the record of the version save id made in key's session, if it is among those
// Save recognises a repeat by (the head, the last pack's versions and the saves after it:
// savedBefore), without saving anything; ok is false if it is not. It is for a repeat whose
// conversation can no longer be read (a chunked save sent again after the first send was stored
// and its chunks removed): the caller answers it as the duplicate it is. The log's last entry is
// read first, so a version another daemon stored is found too.
func (e *Engine) SavedBy(ctx context.Context, key Key, saveID string) (rec Record, ok bool, err error) {
	if e.invalid != nil {
		return Record{}, false, e.invalid
	}
	if saveID == "" {
		return Record{}, false, nil
	}
	for attempt := 0; attempt < maxReadAttempts; attempt++ {
		s := e.session(key)
		rec, ok, err = e.savedByOnce(ctx, s, saveID)
		if e.again(ctx, s, err) {
			continue
		}
		return rec, ok, err
	}
	return Record{}, false, fmt.Errorf("%w: session %s: the log kept moving while save id %q was looked up", ErrBusy, key, saveID)
}

// savedByOnce is one attempt of SavedBy. A cached session is checked against the log first (a
// conflict if it moved on: SavedBy reads it again).
func (e *Engine) savedByOnce(ctx context.Context, s *session, saveID string) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loaded {
		if err := e.checkCached(ctx, s); err != nil {
			return Record{}, false, err
		}
	} else if err := e.load(ctx, s); err != nil {
		return Record{}, false, err
	}
	return e.savedBefore(ctx, s, saveID)
}
