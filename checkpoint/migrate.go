package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Seal marks key's session moved to movedTo (recorded without any credentials it carries), provided its head is still version expected. From
// then on it refuses writes with ErrMoved; its versions stay readable. Migrate calls it last.
func (c *Client) Seal(ctx context.Context, key Key, expected uint64, movedTo string) (Version, error) {
	key, err := checkKey(key)
	if err != nil {
		return Version{}, err
	}
	var v Version
	req := wire.SealRequest{SessionRequest: sessionRequest(key), Expected: expected, MovedTo: PublicURL(movedTo)}
	return v, c.call(ctx, wire.APISubject(key.Namespace, wire.OpSeal), req, &v)
}

// Delete removes key's session: every version and every stored message. With expected set, only
// if the head is still that version (else ErrConflict). It returns the head it deleted.
func (c *Client) Delete(ctx context.Context, key Key, expected *uint64) (Version, error) {
	key, err := checkKey(key)
	if err != nil {
		return Version{}, err
	}
	c.mu.Lock()
	delete(c.last, key)
	c.mu.Unlock()
	var v Version
	req := wire.DeleteRequest{SessionRequest: sessionRequest(key), Expected: expected}
	return v, c.call(ctx, wire.APISubject(key.Namespace, wire.OpDelete), req, &v)
}

// Import stores conversation as a copy of rec, a version made elsewhere: same number, hash, writer,
// reason and creation time, with an Origin saying via ("migrate" or "import") and from where. The
// daemon refuses it unless the conversation hashes to rec.Hash. Importing a version the session
// already has with the same hash changes nothing; with another hash it is ErrConflict.
func (c *Client) Import(ctx context.Context, key Key, rec Version, conversation []byte, via, source string) (Version, error) {
	return c.Save(ctx, key, conversation, func(o *saveOptions) {
		o.imported, o.via, o.source = &rec, via, headerSafe(source)
	})
}

func headerSafe(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

// MigrateOptions control Migrate.
type MigrateOptions struct {
	HeadOnly bool   // copy only the head version (default: every version the source keeps); onto a destination that has the session, the versions after its head
	Forget   bool   // delete the session at the source afterwards, instead of sealing it
	Force    bool   // move it even while a process holds its lease at the source
	MovedTo  string // what the sealed source says the session moved to (the destination's URL, recorded without credentials)
	// Progress, when set, is called after each version copied.
	Progress func(MigrateProgress)
}

// MigrateProgress counts what one Migrate call copied so far.
type MigrateProgress struct {
	Key      Key
	Version  uint64 // the version just copied
	Versions int    // versions copied
	Skipped  int    // versions the destination already had
	Bytes    int64  // conversation bytes copied (canonical JSON)
}

// Migrate moves one session from this client's deployment to another's: it copies the versions the
// destination lacks (each verified against its hash on arrival), then seals the session at the
// source so that it refuses writes (or deletes it, with Forget). It is idempotent and resumable: run
// again after an interruption, it copies only what is missing; a write that reaches the source
// meanwhile is copied too before the seal, which only succeeds on the head it copied.
func (c *Client) Migrate(ctx context.Context, to *Client, key Key, o MigrateOptions) (MigrateProgress, error) {
	key, err := checkKey(key)
	if err != nil {
		return MigrateProgress{}, err
	}
	p := MigrateProgress{Key: key}
	o.MovedTo = PublicURL(o.MovedTo) // what Seal records: never a password
	agents, err := c.list(ctx, wire.APISubject(key.Namespace, wire.OpList), key.Session)
	if err != nil {
		return p, err
	}
	for _, a := range agents {
		if a.Key == key && a.Moved != nil && a.Moved.To != o.MovedTo {
			return p, &Error{Code: wire.CodeMoved, MovedTo: a.Moved.To, Index: -1, Offset: -1,
				Message: fmt.Sprintf("session %s already moved to %s: migrate it from there", key, a.Moved.To)}
		}
	}
	if !o.Force {
		l, err := c.LeaseStatus(ctx, key)
		if err != nil {
			return p, err
		}
		if l.Held(time.Now()) {
			return p, &Error{Code: wire.CodeLeased, Owner: l.Owner, Epoch: l.Epoch, Index: -1, Offset: -1,
				Message: fmt.Sprintf("session %s is leased by %s (epoch %d) at the source: pause it first, or force the move", key, l.Owner, l.Epoch)}
		}
	}
	for attempt := 0; attempt < 5; attempt++ {
		head, err := c.copyMissing(ctx, to, key, o, &p)
		if err != nil {
			return p, err
		}
		if o.Forget {
			_, err = c.Delete(ctx, key, &head)
		} else {
			_, err = c.Seal(ctx, key, head, o.MovedTo)
		}
		if !errors.Is(err, ErrConflict) {
			return p, err
		}
		// A save reached the source while we copied: copy it too, then seal again.
	}
	return p, unavailable("session %s: the source kept changing while it was migrated", key)
}

// copyMissing copies the versions of key the destination lacks and returns the source head copied.
func (c *Client) copyMissing(ctx context.Context, to *Client, key Key, o MigrateOptions, p *MigrateProgress) (uint64, error) {
	hist, err := c.History(ctx, key)
	if err != nil {
		return 0, err
	}
	head := hist[len(hist)-1]
	have := uint64(0)
	dst, err := to.Get(ctx, key, 0)
	switch {
	case errors.Is(err, ErrNotFound):
		if o.HeadOnly {
			hist = hist[len(hist)-1:]
		}
	case err != nil:
		return 0, err
	default:
		// The destination has the session: it takes the versions after its head, in order (an
		// import continues a session's line, never jumps), head-only or not.
		have = dst.Version
		if err := sameSession(ctx, c, to, key, min(dst.Version, head.Version)); err != nil {
			return 0, err
		}
	}
	for _, v := range hist {
		if v.Version <= have {
			p.Skipped++
			continue
		}
		conv, _, err := c.Restore(ctx, key, v.Version)
		if err != nil {
			return 0, fmt.Errorf("reading version %d at the source: %w", v.Version, err)
		}
		if _, err := to.Import(ctx, key, v, conv, wire.ReasonMigrate, c.nc.ConnectedUrlRedacted()); err != nil {
			return 0, fmt.Errorf("copying version %d: %w", v.Version, err)
		}
		p.Version, p.Versions, p.Bytes = v.Version, p.Versions+1, p.Bytes+int64(len(conv))
		if o.Progress != nil {
			o.Progress(*p)
		}
	}
	if have == head.Version {
		// Nothing to copy. If the destination is sealed, this is the session coming back to where
		// it was: importing its head again (a duplicate) lifts the seal.
		if err := c.unsealAt(ctx, to, key, head); err != nil {
			return 0, err
		}
	}
	return head.Version, nil
}

// unsealAt re-imports head at to when to holds the session sealed as moved.
func (c *Client) unsealAt(ctx context.Context, to *Client, key Key, head Version) error {
	agents, err := to.list(ctx, wire.APISubject(key.Namespace, wire.OpList), key.Session)
	if err != nil {
		return err
	}
	for _, a := range agents {
		if a.Key != key || a.Moved == nil {
			continue
		}
		conv, _, err := c.Restore(ctx, key, head.Version)
		if err != nil {
			return fmt.Errorf("reading version %d at the source: %w", head.Version, err)
		}
		if _, err := to.Import(ctx, key, head, conv, wire.ReasonMigrate, c.nc.ConnectedUrlRedacted()); err != nil {
			return fmt.Errorf("bringing the session back: %w", err)
		}
	}
	return nil
}

// sameSession checks that source and destination have the same version n: the two are one
// session's history (the destination may have gone on since), not two sessions sharing a key.
func sameSession(ctx context.Context, src, dst *Client, key Key, n uint64) error {
	conflict := func(why string) error {
		return &Error{Code: wire.CodeConflict, Index: -1, Offset: -1,
			Message: fmt.Sprintf("session %s: %s: they are different sessions; move or delete the destination's first", key, why)}
	}
	a, err := src.Get(ctx, key, n)
	if errors.Is(err, ErrNotFound) {
		return conflict(fmt.Sprintf("the destination has version %d, which the source does not keep", n))
	}
	if err != nil {
		return err
	}
	b, err := dst.Get(ctx, key, n)
	if errors.Is(err, ErrNotFound) {
		return conflict(fmt.Sprintf("the source has version %d, which the destination does not keep", n))
	}
	if err != nil {
		return err
	}
	if a.Hash != b.Hash {
		return conflict(fmt.Sprintf("version %d differs between source (%s) and destination (%s)", n, a.Hash, b.Hash))
	}
	return nil
}
