package upgrade

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/snapshot/kvstore"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// openFormat2 opens format 2's store as its own code does, with the replica count its buckets
// have (kvstore.OpenStore would otherwise update them: the upgrade changes nothing of format 2).
func (u *upgrader) openFormat2(ctx context.Context) (*kvstore.Store, error) {
	heads, err := u.js.Stream(ctx, "KV_"+wire.BucketHeads)
	if err != nil {
		return nil, fmt.Errorf("upgrade: format 2's bucket %s: %w", wire.BucketHeads, err)
	}
	st, err := kvstore.OpenStore(ctx, u.js, kvstore.StoreConfig{Replicas: heads.CachedInfo().Config.Replicas,
		ChunkSize: u.opts.ChunkSize, Keys: u.opts.Keys})
	if err != nil {
		return nil, fmt.Errorf("upgrade: opening format 2: %w", err)
	}
	return st, nil
}

// format2Heads returns every head of cp_heads that holds something (a version, a lease or a
// seal), in key order, so that runs go through sessions in the same order. It reads cp_heads
// itself, through an ephemeral consumer of its stream, and never creates a bucket (format 2's
// OpenStore would): after "done" the buckets may be going, deleted by another daemon, which
// comes back as errDeleting.
func (u *upgrader) format2Heads(ctx context.Context) ([]snapshot.Head, error) {
	heads, err := u.scanHeads(ctx)
	if err != nil {
		if gone, gerr := u.headsGone(ctx); gerr == nil && gone {
			return nil, errDeleting
		}
		return nil, fmt.Errorf("upgrade: listing format 2's sessions (%s): %w", wire.BucketHeads, err)
	}
	heads = slices.DeleteFunc(heads, func(h snapshot.Head) bool { return !h.Exists() && h.Lease == nil && h.Moved == nil })
	slices.SortFunc(heads, func(a, b snapshot.Head) int { return cmp.Compare(wire.Key(a.Key).Token(), wire.Key(b.Key).Token()) })
	return heads, nil
}

// errDeleting: cp_heads went away while the upgrade read it after "done": another daemon is
// deleting format 2's buckets.
var errDeleting = fmt.Errorf("%w: format 2's buckets are being deleted by another daemon that finished the upgrade", ErrInProgress)

// headsGone reports whether cp_heads's stream is gone.
func (u *upgrader) headsGone(ctx context.Context) (bool, error) {
	_, err := u.js.Stream(ctx, "KV_"+wire.BucketHeads)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return true, nil
	}
	return false, err
}

// scanHeads reads the last message of every key of cp_heads (a head, or a deletion marker,
// skipped), in batches through one ephemeral pull consumer, as format 2's own listing does.
func (u *upgrader) scanHeads(ctx context.Context) ([]snapshot.Head, error) {
	stream, err := u.js.Stream(ctx, "KV_"+wire.BucketHeads)
	if err != nil {
		return nil, err
	}
	prefix := "$KV." + wire.BucketHeads + "."
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
		FilterSubject: prefix + ">", AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, Replicas: 1,
		InactiveThreshold: time.Minute}) // the server removes it if this daemon dies midway
	if err != nil {
		return nil, err
	}
	defer func() { _ = stream.DeleteConsumer(context.WithoutCancel(ctx), cons.CachedInfo().Name) }()
	var heads []snapshot.Head
	for pending := cons.CachedInfo().NumPending; pending > 0; {
		batch, err := cons.FetchNoWait(int(min(pending, 256)))
		if err != nil {
			return nil, err
		}
		got := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			got, pending = got+1, meta.NumPending
			if op := m.Headers().Get("KV-Operation"); op == "DEL" || op == "PURGE" {
				continue
			}
			var h snapshot.Head
			if err := json.Unmarshal(m.Data(), &h); err != nil {
				return nil, fmt.Errorf("%w: the head %q: %v", snapshot.ErrCorrupt, strings.TrimPrefix(m.Subject(), prefix), err)
			}
			heads = append(heads, h)
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if got == 0 {
			return nil, fmt.Errorf("%d heads were pending and none came", pending)
		}
	}
	return heads, nil
}

// copyAll copies every session of format 2 into the engine, and purges the sessions of the log
// that format 2 does not have.
func (u *upgrader) copyAll(ctx context.Context) error {
	st, err := u.openFormat2(ctx)
	if err != nil {
		return err
	}
	heads, err := u.format2Heads(ctx)
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
			return fmt.Errorf("upgrade: session %q: %w", keyOf(h.Key), err)
		}
	}
	return u.purgeOthers(ctx, want)
}

// copySession makes the engine hold session h as format 2 does: skipped if it already does,
// purged and copied again if it holds something else (a run killed half-way through it), and
// checked once copied.
func (u *upgrader) copySession(ctx context.Context, st *kvstore.Store, h snapshot.Head) error {
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
	if got, err = u.eng.HeadState(ctx, key); err != nil {
		return fmt.Errorf("copied, but reading it back: %w", err)
	}
	if diff := differences(h, got); len(diff) > 0 {
		return fmt.Errorf("copied, but the log engine's head (version %d %s, first %d) is not format 2's (version %d %s, first %d); what differs: %s",
			got.Record.Version, got.Record.Hash, got.FirstVersion, h.Version.Version, h.Hash, max(h.FirstVersion, 1), strings.Join(diff, ", "))
	}
	u.rep.Sessions++
	return nil
}

// copyVersions copies every version format 2 keeps of h's session, oldest first, each read
// through format 2's own code (snapshot.Read checks it against its hash).
func (u *upgrader) copyVersions(ctx context.Context, st *kvstore.Store, h snapshot.Head) error {
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
	return u.engineSessions(ctx, func(k engine.Key) error {
		if want[k] {
			return nil
		}
		if err := u.log.Purge(ctx, k); err != nil {
			return fmt.Errorf("upgrade: purging %q, which format 2 does not have: %w", k, err)
		}
		u.eng.Forget() // it may have cached the purged log (reads of the head trust it: Log.Moved)
		u.rep.Purged++
		return u.wrote(ctx, "purged "+k.String())
	})
}

// engineSessions calls fn with every session whose log holds an entry, namespace by namespace.
func (u *upgrader) engineSessions(ctx context.Context, fn func(engine.Key) error) error {
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
				if _, err := u.log.Last(ctx, k); errors.Is(err, engine.ErrNotFound) {
					continue // listed, but purged
				} else if err != nil {
					return fmt.Errorf("upgrade: reading the log of %q: %w", k, err)
				}
				if err := fn(k); err != nil {
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

// checkUnchanged checks that format 2 holds exactly the sessions the engine holds, both ways:
// every head of format 2 is the engine's head of its session, and every session of the engine
// has a head in format 2. If not, an older daemon wrote to format 2 after the upgrade copied the
// session (a save, a lease, a deletion), and deleting the buckets would lose that. doneAt is when
// the upgrade finished (zero: it has not yet, this run is about to write "done").
func (u *upgrader) checkUnchanged(ctx context.Context, doneAt time.Time) error {
	heads, err := u.format2Heads(ctx)
	if err != nil {
		return err
	}
	var changed []string
	inFormat2 := make(map[engine.Key]bool, len(heads))
	for _, h := range heads {
		key := keyOf(h.Key)
		inFormat2[key] = true
		got, err := u.eng.HeadState(ctx, key)
		switch {
		case errors.Is(err, engine.ErrNotFound):
			changed = append(changed, fmt.Sprintf("%q (not in the log engine)", key))
		case err != nil:
			return fmt.Errorf("upgrade: reading %q back: %w", key, err)
		default:
			if diff := differences(h, got); len(diff) > 0 {
				changed = append(changed, fmt.Sprintf("%q (%s)", key, strings.Join(diff, ", ")))
			}
		}
	}
	err = u.engineSessions(ctx, func(k engine.Key) error {
		if !inFormat2[k] {
			changed = append(changed, fmt.Sprintf("%q (deleted in format 2)", k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(changed) == 0 {
		return nil
	}
	if gone, err := u.headsGone(ctx); err == nil && gone {
		return errDeleting // another daemon finished: what the engine holds may be its clients' since
	}
	if len(changed) > 5 {
		changed = append(changed[:5], fmt.Sprintf("and %d more", len(changed)-5))
	}
	if doneAt.IsZero() {
		return fmt.Errorf("%w: format 2's sessions %s changed after this run copied them: an older checkpointd is running on this store. "+
			"Nothing of format 2 was deleted and the upgrade is not done: stop every older checkpointd on this store, then start this one again (it copies what changed)",
			ErrChangedAfter, strings.Join(changed, ", "))
	}
	return fmt.Errorf("%w: the upgrade finished at %s, but format 2's sessions %s differ from the log engine's now (an older checkpointd ran on this store since). Nothing was deleted. "+
		"Stop every older checkpointd, export those sessions with one (checkpointctl export SESSION --file F) and import them with this one (checkpointctl import F), then delete format 2's buckets (%s) with the nats CLI (nats kv del BUCKET)",
		ErrChangedAfter, doneAt.Format(time.RFC3339), strings.Join(changed, ", "), strings.Join(Buckets, ", "))
}

// same reports whether the engine's head of a session is format 2's head h: the same head
// version (number, hash, save id), first version, lease and seal. Versions are copied in order
// and the lease and seal last, so a session whose head is the same is copied completely.
func same(h snapshot.Head, got engine.HeadState) bool { return len(differences(h, got)) == 0 }

// differences names what differs between format 2's head h and the engine's head of the session
// (never the values: a save id, writer or lease owner is sealed in the log engine under
// --namespace-keys, and these names go into errors an operator reads).
func differences(h snapshot.Head, got engine.HeadState) []string {
	var diff []string
	if got.Record.Version != h.Version.Version {
		diff = append(diff, fmt.Sprintf("head version %d in the log engine, %d in format 2", got.Record.Version, h.Version.Version))
	}
	if h.Exists() && got.Record.Version == h.Version.Version {
		if got.Record.Hash != h.Hash {
			diff = append(diff, "hash")
		}
		if got.Record.SaveID != h.SaveID {
			diff = append(diff, "save id")
		}
		if got.FirstVersion != max(h.FirstVersion, 1) {
			diff = append(diff, fmt.Sprintf("first version %d in the log engine, %d in format 2", got.FirstVersion, max(h.FirstVersion, 1)))
		}
	}
	if !engine.SameLease(leaseOf(h.Lease), got.Lease) {
		diff = append(diff, "lease")
	}
	if !engine.SameMoved(movedOf(h.Moved), got.Moved) {
		diff = append(diff, "moved mark")
	}
	return diff
}

func keyOf(k snapshot.Key) engine.Key {
	return engine.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
}

// recordOf is format 2's record in the engine's terms: every field but the format number, the
// storage generation (Gen) and StoredBytes, which are facts of format 2's storage.
func recordOf(v snapshot.Version) engine.Record {
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

func leaseOf(l *snapshot.Lease) *engine.Lease {
	if l == nil {
		return nil
	}
	return &engine.Lease{Epoch: l.Epoch, Owner: l.Owner, Acquired: l.Acquired, Expires: l.Expires}
}

func movedOf(m *snapshot.Moved) *engine.Moved {
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
