package transfer

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// headIndex is this daemon's copy of every session's head as a listing shows it, kept up to date by
// one long-lived ordered consumer on the heads bucket's stream, and paged from memory.
//
// Why: a listing used to open a KV watch over every head, per request. Its cost grew with the
// number of sessions, and 64 listings at once of 10,000 sessions pushed 640,000 messages through the
// daemon's one connection: the server cut it as a slow consumer (issue 10). Now a listing costs one
// stream info request (how far the heads stream is, for read-your-writes) and one page copied from
// memory, whatever the number of sessions (BENCHMARKS.md). The price is memory: one encoded head,
// a few hundred bytes, per session, in every daemon (each keeps its own index).
//
// Alternatives weighed: JetStream's batched direct get (multi_last, nats-server 2.11+) returns the
// last message of many subjects in one request, but in stream order, not key order, so a page by
// offset would still read every head; KV Keys() is a watch too.
type headIndex struct {
	stream jetstream.Stream // the heads bucket's stream
	log    *slog.Logger

	mu       sync.RWMutex
	byKey    map[string]*indexEntry // by KV key (the session key's token)
	sorted   []*indexEntry          // by namespace, session, agent; nil until a listing needs it (sort)
	applied  uint64                 // stream sequence of the last message applied
	versions uint64                 // the sum of the head version numbers of byKey (size)
	moved    chan struct{}          // closed (and replaced) whenever applied moves

	cons jetstream.Consumer
	cc   jetstream.ConsumeContext
}

// indexEntry is one session's head as listed.
type indexEntry struct {
	key     wire.Key
	enc     []byte // the wire.SessionHead, as JSON
	version uint64 // the head's version number
	err     error  // a head that cannot be read: listing it reports this, as reading it would
}

// size is the number of sessions the index knows, and the sum of their head version numbers.
func (x *headIndex) size() (sessions int, versions uint64) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byKey), x.versions
}

// bulkPending is how many changes still to come make the index drop its order rather than keep it
// one insertion at a time (a daemon catching up on a million heads sorts once, when first listed).
const bulkPending = 1000

func newHeadIndex(stream jetstream.Stream, log *slog.Logger) *headIndex {
	return &headIndex{stream: stream, log: log, byKey: map[string]*indexEntry{}, moved: make(chan struct{})}
}

// start begins following the heads stream: the current head of every session first, then every
// change. nats.go's ordered consumer recreates itself after a gap, a reconnect or a deletion,
// from the sequence after the last one applied.
func (x *headIndex) start(ctx context.Context) error {
	cons, err := x.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"$KV." + wire.BucketHeads + ".>"},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return fmt.Errorf("heads index: %w", err)
	}
	cc, err := cons.Consume(x.apply, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		x.log.Warn("heads index: consumer", "err", err)
	}))
	if err != nil {
		return fmt.Errorf("heads index: %w", err)
	}
	x.cons, x.cc = cons, cc
	return nil
}

func (x *headIndex) stop() {
	if x.cc != nil {
		x.cc.Stop()
	}
}

// apply folds one message of the heads stream into the index.
func (x *headIndex) apply(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		x.log.Error("heads index: message without metadata", "subject", msg.Subject(), "err", err)
		return
	}
	token := strings.TrimPrefix(msg.Subject(), "$KV."+wire.BucketHeads+".")
	key, err := wire.ParseToken(token)
	if err != nil {
		// Not a key checkpointd writes: nothing to list, and nothing a listing could name.
		x.log.Warn("heads index: ignoring a key that names no session", "subject", msg.Subject(), "err", err)
		x.mu.Lock()
		x.advanceLocked(meta.Sequence.Stream)
		x.mu.Unlock()
		return
	}
	e := entryOf(key, msg)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sorted != nil && meta.NumPending > bulkPending {
		x.sorted = nil
	}
	old, had := x.byKey[token]
	switch {
	case e == nil && had:
		x.versions -= old.version
		delete(x.byKey, token)
		if i, ok := x.search(key); ok {
			x.sorted = slices.Delete(x.sorted, i, i+1)
		}
	case e != nil && had:
		x.versions += e.version - old.version // wraps back correctly when the head moved down
		*old = *e                             // the same key: its place in the order stands
	case e != nil:
		x.versions += e.version
		x.byKey[token] = e
		if i, ok := x.search(key); !ok && x.sorted != nil {
			x.sorted = slices.Insert(x.sorted, i, e)
		}
	}
	x.advanceLocked(meta.Sequence.Stream)
}

// entryOf decodes a head message into its listing entry; nil for a deleted head or one without a
// version (a session that holds only a lease).
func entryOf(key wire.Key, msg jetstream.Msg) *indexEntry {
	if op := msg.Headers().Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil
	}
	var h wire.SessionHead // the fields of snapshot.Head a listing shows; the rest is skipped
	if err := json.Unmarshal(msg.Data(), &h); err != nil {
		return &indexEntry{key: key, err: fmt.Errorf("session %s: %w: stored head: %v", key, snapshot.ErrCorrupt, err)}
	}
	if h.Version.Version == 0 {
		return nil
	}
	enc, err := json.Marshal(h)
	if err != nil {
		return &indexEntry{key: key, err: fmt.Errorf("session %s: %w: stored head: %v", key, snapshot.ErrCorrupt, err)}
	}
	return &indexEntry{key: key, enc: enc, version: h.Version.Version}
}

func (x *headIndex) advanceLocked(seq uint64) {
	x.applied = max(x.applied, seq)
	close(x.moved)
	x.moved = make(chan struct{})
}

func compareKeys(a, b wire.Key) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Session, b.Session), cmp.Compare(a.Agent, b.Agent))
}

// search finds key's place in x.sorted; x.mu is held.
func (x *headIndex) search(key wire.Key) (int, bool) {
	return slices.BinarySearchFunc(x.sorted, key, func(e *indexEntry, k wire.Key) int { return compareKeys(e.key, k) })
}

// caughtUp waits until the index holds every head change stored before the call (read-your-writes:
// a listing shows every save acknowledged before it). The heads stream's last sequence comes from
// its leader.
func (x *headIndex) caughtUp(ctx context.Context) error {
	info, err := x.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("%w: reading the heads stream's state: %v", errUnavailable, err)
	}
	target := info.State.LastSeq
	check := time.NewTicker(time.Second)
	defer check.Stop()
	for {
		x.mu.RLock()
		applied, moved := x.applied, x.moved
		x.mu.RUnlock()
		if applied >= target {
			return nil
		}
		select {
		case <-moved:
		case <-check.C:
			if x.nothingPending(ctx, applied) {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("%w: the list of sessions is still catching up (at sequence %d of %d)", errUnavailable, applied, target)
		}
	}
}

// nothingPending reports whether the consumer has delivered every message and the index applied
// the last: the messages up to the target were removed from the stream before they could be
// delivered, and waiting for them would never end.
func (x *headIndex) nothingPending(ctx context.Context, applied uint64) bool {
	info, err := x.cons.Info(ctx)
	return err == nil && info.NumPending == 0 && info.Delivered.Stream <= applied
}

// page is the reply to a listing: the heads of namespace ns ("" for every namespace), of one
// session if session is set, ordered by namespace, session and agent, from offset on, as many as
// fit in max bytes (a wire.ListReply).
func (x *headIndex) page(ns, session string, offset int, max int64) (reply, error) {
	x.mu.RLock()
	for x.sorted == nil { // a bulk change dropped the order
		x.mu.RUnlock()
		x.sort()
		x.mu.RLock()
	}
	defer x.mu.RUnlock()
	var b bytes.Buffer
	b.WriteString(`{"sessions":[`)
	n, more := 0, false
	for _, e := range x.listing(ns, session, offset) {
		if e.err != nil {
			return reply{}, e.err
		}
		if n > 0 && int64(b.Len()+len(e.enc))+32 > max {
			more = true
			break
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.Write(e.enc)
		n++
	}
	b.WriteByte(']')
	if more {
		b.WriteString(`,"more":true`)
	}
	b.WriteByte('}')
	return reply{data: b.Bytes()}, nil
}

// sort puts the entries in key order again.
func (x *headIndex) sort() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sorted != nil {
		return
	}
	x.sorted = make([]*indexEntry, 0, len(x.byKey))
	for _, e := range x.byKey {
		x.sorted = append(x.sorted, e)
	}
	slices.SortFunc(x.sorted, func(a, b *indexEntry) int { return compareKeys(a.key, b.key) })
}

// listing returns the entries of a listing from offset on; x.mu is held (read) and x.sorted set.
// The entries of one namespace (and session) are one run of the order, found by binary search, so
// skipping to offset costs nothing; only an admin listing of one session name across namespaces
// filters every entry.
func (x *headIndex) listing(ns, session string, offset int) iter.Seq2[int, *indexEntry] {
	if ns == "" && session != "" {
		return func(yield func(int, *indexEntry) bool) {
			i := 0
			for _, e := range x.sorted {
				if e.key.Session != session {
					continue
				}
				if i >= offset && !yield(i, e) {
					return
				}
				i++
			}
		}
	}
	lo, hi := 0, len(x.sorted)
	if ns != "" {
		run := func(e *indexEntry) int { // < 0 before the run, 0 in it, > 0 after it
			c := cmp.Compare(e.key.Namespace, ns)
			if c == 0 && session != "" {
				c = cmp.Compare(e.key.Session, session)
			}
			return c
		}
		lo = sort.Search(len(x.sorted), func(i int) bool { return run(x.sorted[i]) >= 0 })
		hi = sort.Search(len(x.sorted), func(i int) bool { return run(x.sorted[i]) > 0 })
	}
	return slices.All(x.sorted[min(lo+offset, hi):hi])
}
