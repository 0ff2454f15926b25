package upgrade

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// openFormat2 opens format 2's store as its own code does, with the replica count its buckets
// have (transfer.OpenStore would otherwise update them: the upgrade changes nothing of format 2).
func (u *upgrader) openFormat2(ctx context.Context) (*transfer.Store, error) {
	heads, err := u.js.Stream(ctx, "KV_"+wire.BucketHeads)
	if err != nil {
		return nil, fmt.Errorf("upgrade: format 2's bucket %s: %w", wire.BucketHeads, err)
	}
	st, err := transfer.OpenStore(ctx, u.js, transfer.StoreConfig{Replicas: heads.CachedInfo().Config.Replicas,
		ChunkSize: u.opts.ChunkSize, Keys: u.opts.Keys})
	if err != nil {
		return nil, fmt.Errorf("upgrade: opening format 2: %w", err)
	}
	return st, nil
}

// format2Heads returns every head of cp_heads that holds something (a version, a lease or a
// seal), in key order, so that runs go through sessions in the same order.
func format2Heads(ctx context.Context, st *transfer.Store) ([]snapshot.Head, error) {
	heads, err := st.Heads(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("upgrade: listing format 2's sessions: %w", err)
	}
	heads = slices.DeleteFunc(heads, func(h snapshot.Head) bool { return !h.Exists() && h.Lease == nil && h.Moved == nil })
	slices.SortFunc(heads, func(a, b snapshot.Head) int { return cmp.Compare(a.Key.Token(), b.Key.Token()) })
	return heads, nil
}

// copyAll copies every session of format 2 into the engine, and purges the sessions of the log
// that format 2 does not have.
func (u *upgrader) copyAll(ctx context.Context) error {
	st, err := u.openFormat2(ctx)
	if err != nil {
		return err
	}
	heads, err := format2Heads(ctx, st)
	if err != nil {
		return err
	}
	want := make(map[engine.Key]bool, len(heads))
	for _, h := range heads {
		want[keyOf(h.Key)] = true
		if err := u.heartbeat(ctx); err != nil {
			return err
		}
		if err := u.copySession(ctx, st, h); err != nil {
			return fmt.Errorf("upgrade: session %s: %w", keyOf(h.Key), err)
		}
	}
	return u.purgeOthers(ctx, want)
}

// copySession makes the engine hold session h as format 2 does: skipped if it already does,
// purged and copied again if it holds something else (a run killed half-way through it), and
// checked once copied.
func (u *upgrader) copySession(ctx context.Context, st *transfer.Store, h snapshot.Head) error {
	key := keyOf(h.Key)
	got, err := u.eng.HeadState(ctx, key)
	switch {
	case errors.Is(err, engine.ErrNotFound):
	case err != nil:
		return err
	case same(h, got):
		u.rep.Skipped++
		return nil
	default:
		if err := u.log.Purge(ctx, key); err != nil {
			return fmt.Errorf("purging what a killed run copied: %w", err)
		}
		u.eng.Forget() // it may have cached the purged log
		u.rep.Redone++
		if err := u.wrote(ctx, "purged "+key.String()); err != nil {
			return err
		}
	}
	if h.Exists() {
		if err := u.copyVersions(ctx, st, h); err != nil {
			return err
		}
	}
	if h.Lease != nil || h.Moved != nil {
		if err := u.eng.CopyState(ctx, key, leaseOf(h.Lease), movedOf(h.Moved)); err != nil {
			return fmt.Errorf("copying its lease and seal: %w", err)
		}
		if h.Lease != nil {
			u.rep.Leases++
		}
		if h.Moved != nil {
			u.rep.Moved++
		}
		if err := u.wrote(ctx, "state of "+key.String()); err != nil {
			return err
		}
	}
	if res, err := u.eng.Pack(ctx, key, false); err != nil {
		return fmt.Errorf("packing: %w", err)
	} else if res.Entries > 0 {
		if err := u.wrote(ctx, "pack of "+key.String()); err != nil {
			return err
		}
	}
	if got, err = u.eng.HeadState(ctx, key); err != nil || !same(h, got) {
		return fmt.Errorf("copied, but the log engine's head (%+v, %v) is not format 2's (version %d %s, first %d, lease %+v, moved %+v)",
			got, err, h.Version.Version, h.Hash, h.FirstVersion, h.Lease, h.Moved)
	}
	u.rep.Sessions++
	return nil
}

// copyVersions copies every version format 2 keeps of h's session, oldest first, each read
// through format 2's own code (snapshot.Read checks it against its hash).
func (u *upgrader) copyVersions(ctx context.Context, st *transfer.Store, h snapshot.Head) error {
	versions, err := snapshot.History(ctx, st, h.Key)
	if err != nil {
		return fmt.Errorf("reading its history in format 2: %w", err)
	}
	cache := &segmentCache{}
	for _, v := range versions {
		conv, err := snapshot.Read(ctx, st, v, cache)
		if err != nil {
			return fmt.Errorf("reading version %d in format 2: %w", v.Version, err)
		}
		rec, err := u.eng.CopyVersion(ctx, recordOf(v), conv)
		if err != nil {
			return fmt.Errorf("copying version %d: %w", v.Version, err)
		}
		u.rep.Versions++
		u.rep.ConversationBytes += int64(len(conv))
		u.rep.StoredBytes += rec.StoredBytes
		if err := u.wrote(ctx, fmt.Sprintf("version %d of %s", v.Version, rec.Key)); err != nil {
			return err
		}
		if err := u.heartbeat(ctx); err != nil {
			return err
		}
	}
	return nil
}

// purgeOthers purges the logs on the stream that format 2 has no session for: a session deleted
// in format 2 after a killed run had copied it (an older daemon ran in between).
func (u *upgrader) purgeOthers(ctx context.Context, want map[engine.Key]bool) error {
	namespaces, err := u.log.Namespaces(ctx)
	if err != nil {
		return fmt.Errorf("upgrade: listing the log's namespaces: %w", err)
	}
	for _, ns := range namespaces {
		for cursor := uint64(0); ; {
			keys, next, err := u.log.Sessions(ctx, ns, cursor, 1024)
			if err != nil {
				return fmt.Errorf("upgrade: listing the log's sessions of %q: %w", ns, err)
			}
			for _, k := range keys {
				if want[k] {
					continue
				}
				if _, err := u.log.Last(ctx, k); errors.Is(err, engine.ErrNotFound) {
					continue
				}
				if err := u.log.Purge(ctx, k); err != nil {
					return fmt.Errorf("upgrade: purging %s, which format 2 does not have: %w", k, err)
				}
				u.rep.Purged++
				if err := u.wrote(ctx, "purged "+k.String()); err != nil {
					return err
				}
			}
			if next == 0 {
				break
			}
			cursor = next
		}
	}
	return nil
}

// checkUnchanged checks, after "done", that every session of format 2 is still what the engine
// holds: if not, an older daemon wrote to format 2 after the upgrade, and deleting its buckets
// would lose that.
func (u *upgrader) checkUnchanged(ctx context.Context, m marker) error {
	st, err := u.openFormat2(ctx)
	if err != nil {
		return err
	}
	heads, err := format2Heads(ctx, st)
	if err != nil {
		return err
	}
	var changed []string
	for _, h := range heads {
		got, err := u.eng.HeadState(ctx, keyOf(h.Key))
		if err != nil && !errors.Is(err, engine.ErrNotFound) {
			return err
		}
		if err != nil || !same(h, got) {
			changed = append(changed, keyOf(h.Key).String())
		}
	}
	if len(changed) == 0 {
		return nil
	}
	if len(changed) > 5 {
		changed = append(changed[:5], fmt.Sprintf("and %d more", len(changed)-5))
	}
	return fmt.Errorf("%w: the upgrade finished at %s, but format 2's sessions %s differ from the log engine's now (an older checkpointd ran on this store since). Nothing was deleted. "+
		"Export those sessions with the older checkpointd (checkpointctl export SESSION --file F) and import them with this one (checkpointctl import F), then delete format 2's buckets (%s) with the nats CLI (nats kv del BUCKET)",
		ErrChangedAfter, m.At.Format("2006-01-02T15:04:05Z07:00"), strings.Join(changed, ", "), strings.Join(Buckets, ", "))
}

// same reports whether the engine's head of a session is format 2's head h: the same head
// version (number, hash, save id), first version, lease and seal. Versions are copied in order
// and the lease and seal last, so a session whose head is the same is copied completely.
func same(h snapshot.Head, got engine.HeadState) bool {
	if got.Record.Version != h.Version.Version {
		return false
	}
	if h.Exists() && (got.Record.Hash != h.Hash || got.Record.SaveID != h.SaveID || got.FirstVersion != max(h.FirstVersion, 1)) {
		return false
	}
	return sameLease(leaseOf(h.Lease), got.Lease) && sameMoved(movedOf(h.Moved), got.Moved)
}

func sameLease(a, b *engine.Lease) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Epoch == b.Epoch && a.Owner == b.Owner && a.Acquired.Equal(b.Acquired) && a.Expires.Equal(b.Expires)
}

func sameMoved(a, b *engine.Moved) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.To == b.To && a.At.Equal(b.At)
}

func keyOf(k wire.Key) engine.Key {
	return engine.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
}

// recordOf is format 2's record in the engine's terms: every field but the format number, the
// storage generation (Gen) and StoredBytes, which are facts of format 2's storage.
func recordOf(v wire.Version) engine.Record {
	r := engine.Record{Key: keyOf(v.Key), Version: v.Version, Parent: v.Parent, Hash: v.Hash, SaveID: v.SaveID, Writer: v.Writer,
		Reason: v.Reason, Created: v.Created, RawBytes: v.RawBytes, Dialect: v.Dialect,
		Counts: engine.Counts{Messages: v.Counts.Messages, User: v.Counts.User, Assistant: v.Counts.Assistant,
			ToolResult: v.Counts.ToolResult, Extension: v.Counts.Extension, ToolCalls: v.Counts.ToolCalls, System: v.Counts.System}}
	if f := v.ForkOf; f != nil {
		r.ForkOf = &engine.ForkRef{Key: keyOf(f.Key), Version: f.Version}
	}
	if o := v.Origin; o != nil {
		r.Origin = &engine.Origin{Via: o.Via, Source: o.Source, At: o.At}
	}
	return r
}

func leaseOf(l *wire.Lease) *engine.Lease {
	if l == nil {
		return nil
	}
	return &engine.Lease{Epoch: l.Epoch, Owner: l.Owner, Acquired: l.Acquired, Expires: l.Expires}
}

func movedOf(m *wire.Moved) *engine.Moved {
	if m == nil {
		return nil
	}
	return &engine.Moved{To: m.To, At: m.At}
}

// segmentCache keeps format 2's decoded segments while one session's versions are read (each
// version is read whole, and shares most of its segments with the one before), up to
// maxCacheBytes; then it starts again.
type segmentCache struct {
	segs  map[string][]byte
	bytes int
}

const maxCacheBytes = 64 << 20

func (c *segmentCache) GetOrLoad(id string, load func() ([]byte, error)) ([]byte, error) {
	if b, ok := c.segs[id]; ok {
		return b, nil
	}
	b, err := load()
	if err != nil {
		return nil, err
	}
	if c.segs == nil || c.bytes+len(b) > maxCacheBytes {
		c.segs, c.bytes = map[string][]byte{}, 0
	}
	c.segs[id] = b
	c.bytes += len(b)
	return b, nil
}
