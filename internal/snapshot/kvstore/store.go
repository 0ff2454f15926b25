// Package kvstore is format 2's store: snapshot.Store on five JetStream key-value buckets
// (docs/format.md §2–§6). Nothing writes format 2 any more; internal/upgrade reads it to move a
// deployment's sessions onto the log engine, and its tests write it to have something to upgrade.
package kvstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/sealing"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Store keeps sessions on JetStream key-value buckets:
//
//	cp_heads     <ns>.<session>.<agent>             → the head (snapshot.Head, JSON); its revision is the CAS token
//	cp_versions  <ns>.<session>.<agent>.<n>         → version record n (JSON), written once
//	cp_layouts   <ns>.<session>.<agent>.<gen>       → the layout of an older generation (JSON)
//	cp_segments  <ns>.<session>.<agent>.<id>.<i>    → piece i of a segment's blob
//	cp_values    <ns>.<id>                          → a large value stored once per namespace (snapshot.ValueEntry)
//
// The blobs of a namespace's values are segments of the reserved key snapshot.ValuesKey(ns).
//
// Ids are encoded with wire.EncodeID, so no user string can change what a key means.
type Store struct {
	heads, versions, layouts, segments, values jetstream.KeyValue
	segStream, verStream, layStream            jetstream.Stream // the streams under cp_segments, cp_versions and cp_layouts, for purging without markers
	headStream, valStream                      jetstream.Stream
	read                                       edge.Reader // heads from the leader when replicated (internal/transfer/edge)
	chunkSize                                  int
	pieces                                     sync.Pool // buffers of chunkSize for PutSegmentFrom

	// keys seals the pieces of segments (namespacekeys.go); nil: they are stored as they are.
	// SetKeys replaces them on SIGHUP.
	keys atomic.Pointer[sealing.Keys]

	// Deleting a segment waits for grace: a reader that read the layout naming it just before a
	// merge replaced it still finds it.
	grace   time.Duration
	mu      sync.Mutex
	pending map[string]*time.Timer // segment subject → its deletion
}

var _ snapshot.Store = (*Store)(nil)

// StoreConfig sets up the buckets.
type StoreConfig struct {
	Replicas int // JetStream replicas of each bucket (1 on a single server, 3 in a cluster)
	// ChunkSize is the largest piece a segment is cut into; it must fit the server's max_payload.
	ChunkSize int
	// SegmentGrace delays the deletion of segments nothing refers to any more; it must exceed the
	// longest read (0: delete at once).
	SegmentGrace time.Duration
	// Keys, when set, encrypts what is written to cp_segments (--namespace-keys); each piece then
	// grows by sealing.EnvelopeOverhead, which ChunkSize must leave room for.
	Keys *sealing.Keys
}

// OpenStore creates the buckets if they are missing and returns a Store over them.
func OpenStore(ctx context.Context, js jetstream.JetStream, cfg StoreConfig) (*Store, error) {
	if cfg.ChunkSize <= 0 {
		return nil, errors.New("store: chunk size must be positive")
	}
	s := &Store{chunkSize: cfg.ChunkSize, grace: cfg.SegmentGrace, pending: map[string]*time.Timer{},
		read: edge.NewReader(js.Conn(), cfg.Replicas > 1)}
	s.keys.Store(cfg.Keys)
	if cfg.Keys != nil {
		if s.chunkSize <= sealing.EnvelopeOverhead {
			return nil, errors.New("store: chunk size leaves no room for the encryption envelope")
		}
		s.chunkSize -= sealing.EnvelopeOverhead
	}
	s.pieces.New = func() any { b := make([]byte, s.chunkSize); return &b }
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
		desc string
	}{
		{&s.heads, wire.BucketHeads, "checkpointd: the head of each session: its version and where its messages are"},
		{&s.versions, wire.BucketVersion, "checkpointd: every version record"},
		{&s.layouts, wire.BucketLayouts, "checkpointd: where the messages of older generations are"},
		{&s.segments, wire.BucketSegment, "checkpointd: compressed runs of messages"},
		{&s.values, wire.BucketValues, "checkpointd: large values stored once per namespace: where each is and when a save last used it"},
	} {
		kv, err := ensureBucket(ctx, js, jetstream.KeyValueConfig{
			Bucket:      b.name,
			Description: b.desc,
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    max(cfg.Replicas, 1),
		})
		if err != nil {
			return nil, fmt.Errorf("store: bucket %s: %w", b.name, err)
		}
		*b.kv = kv
	}
	var err error
	if s.segStream, err = js.Stream(ctx, "KV_"+wire.BucketSegment); err != nil {
		return nil, fmt.Errorf("store: bucket %s: %w", wire.BucketSegment, err)
	}
	if s.verStream, err = js.Stream(ctx, "KV_"+wire.BucketVersion); err != nil {
		return nil, fmt.Errorf("store: bucket %s: %w", wire.BucketVersion, err)
	}
	if s.layStream, err = js.Stream(ctx, "KV_"+wire.BucketLayouts); err != nil {
		return nil, fmt.Errorf("store: bucket %s: %w", wire.BucketLayouts, err)
	}
	if s.headStream, err = js.Stream(ctx, "KV_"+wire.BucketHeads); err != nil {
		return nil, fmt.Errorf("store: bucket %s: %w", wire.BucketHeads, err)
	}
	if s.valStream, err = js.Stream(ctx, "KV_"+wire.BucketValues); err != nil {
		return nil, fmt.Errorf("store: bucket %s: %w", wire.BucketValues, err)
	}
	return s, nil
}

// ensureBucket opens the bucket, creating it if it is missing and updating it only if its replica
// count differs (see ensureStream).
func ensureBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) { // another instance was quicker
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
		return kv, err
	}
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if err != nil {
		return nil, err
	}
	if s.CachedInfo().Config.Replicas != cfg.Replicas {
		return js.UpdateKeyValue(ctx, cfg)
	}
	return kv, nil
}

// token is a key as format 2's KV keys spell it: "<ns>.<session>.<agent>", each id encoded with
// wire.EncodeID (the same spelling as the protocol's key token, which format 2 shared).
func token(k snapshot.Key) string { return wire.Key(k).Token() }

func versionKey(k snapshot.Key, n uint64) string { return token(k) + "." + strconv.FormatUint(n, 10) }

func segmentKey(k snapshot.Key, id string, part int) string {
	return token(k) + "." + id + "." + strconv.Itoa(part)
}

// Head implements snapshot.Store. With replicas it reads from the leader: a head read must see
// every committed swap (read-your-writes, and no refusal based on a lagging replica).
func (s *Store) Head(ctx context.Context, key snapshot.Key) (snapshot.Head, uint64, error) {
	ctx, cancel := edge.OpContext(ctx)
	defer cancel()
	var h snapshot.Head
	if s.read.Leader {
		data, rev, err := s.leaderValue(ctx, s.headStream, wire.BucketHeads, token(key))
		if err != nil {
			return h, 0, err
		}
		return h, rev, decode(data, &h)
	}
	e, err := s.heads.Get(ctx, token(key))
	if err != nil {
		return snapshot.Head{}, 0, mapKVErr(err)
	}
	return h, e.Revision(), decode(e.Value(), &h)
}

// leaderValue reads a key's value from the leader of the bucket's stream; a deleted or purged
// key is not found.
func (s *Store) leaderValue(ctx context.Context, stream jetstream.Stream, bucket, key string) ([]byte, uint64, error) {
	m, err := s.read.Last(ctx, stream, "$KV."+bucket+"."+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, snapshot.ErrNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, 0, snapshot.ErrNotFound
	}
	return m.Data, m.Sequence, nil
}

// SwapHead implements snapshot.Store.
func (s *Store) SwapHead(ctx context.Context, h snapshot.Head, rev uint64) error {
	ctx, cancel := edge.OpContext(ctx)
	defer cancel()
	data, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = s.heads.Create(ctx, token(h.Key), data)
	} else {
		_, err = s.heads.Update(ctx, token(h.Key), data, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return snapshot.ErrRevisionMismatch
	}
	return err
}

// PutVersion implements snapshot.Store.
func (s *Store) PutVersion(ctx context.Context, v snapshot.Version) error {
	ctx, cancel := edge.OpContext(ctx)
	defer cancel()
	return s.create(ctx, s.versions, versionKey(v.Key, v.Version), v)
}

// Version implements snapshot.Store.
func (s *Store) Version(ctx context.Context, key snapshot.Key, n uint64) (snapshot.Version, error) {
	ctx, cancel := edge.OpContext(ctx)
	defer cancel()
	var v snapshot.Version
	return v, s.get(ctx, s.versions, s.verStream, wire.BucketVersion, versionKey(key, n), &v)
}

// Versions implements snapshot.Store.
func (s *Store) Versions(ctx context.Context, key snapshot.Key) ([]snapshot.Version, error) {
	vs, err := scanAll[snapshot.Version](ctx, s.verStream, wire.BucketVersion, token(key)+".*")
	slices.SortFunc(vs, func(a, b snapshot.Version) int { return cmp.Compare(a.Version, b.Version) })
	return vs, err
}

// PutLayout implements snapshot.Store.
func (s *Store) PutLayout(ctx context.Context, l snapshot.Layout) error {
	ctx, cancel := edge.OpContext(ctx)
	defer cancel()
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	_, err = s.layouts.Put(ctx, versionKey(l.Key, l.Gen), data)
	return err
}

// Layout implements snapshot.Store.
func (s *Store) Layout(ctx context.Context, key snapshot.Key, gen uint64) (snapshot.Layout, error) {
	ctx, cancel := edge.OpContext(ctx)
	defer cancel()
	var l snapshot.Layout
	return l, s.get(ctx, s.layouts, s.layStream, wire.BucketLayouts, versionKey(key, gen), &l)
}

// PutSegment implements snapshot.Store.
func (s *Store) PutSegment(ctx context.Context, key snapshot.Key, ref snapshot.SegmentRef, blob []byte) (snapshot.SegmentRef, error) {
	ref.Chunks = 0
	for off := 0; off < len(blob) || ref.Chunks == 0; off += s.chunkSize {
		end := min(off+s.chunkSize, len(blob))
		pctx, cancel := edge.OpContext(ctx)
		k := segmentKey(key, ref.ID, ref.Chunks)
		_, err := s.segments.Put(pctx, k, s.sealPiece(key.Namespace, k, blob[off:end]))
		cancel()
		if err != nil {
			return snapshot.SegmentRef{}, fmt.Errorf("segment %s: piece %d: %w", ref.ID, ref.Chunks, err)
		}
		ref.Chunks++
	}
	return ref, nil
}

// GetSegment implements snapshot.Store.
func (s *Store) GetSegment(ctx context.Context, key snapshot.Key, ref snapshot.SegmentRef) ([]byte, error) {
	out := make([]byte, 0, ref.StoredBytes)
	var sealed bool
	for i := 0; i < ref.Chunks; i++ {
		pctx, cancel := edge.OpContext(ctx)
		k := segmentKey(key, ref.ID, i)
		data, err := s.value(pctx, s.segments, s.segStream, wire.BucketSegment, k)
		cancel()
		if err == nil {
			data, err = s.openPiece(key.Namespace, k, i, data, &sealed)
		}
		if err != nil {
			return nil, fmt.Errorf("segment %s: piece %d of %d: %w", ref.ID, i, ref.Chunks, err)
		}
		out = append(out, data...)
	}
	if int64(len(out)) != ref.StoredBytes {
		return nil, fmt.Errorf("%w: segment %s is %d bytes, its reference says %d", snapshot.ErrCorrupt, ref.ID, len(out), ref.StoredBytes)
	}
	return out, nil
}

// PutSegmentFrom implements snapshot.Store: pieces of at most the chunk size are stored as they are
// read, so the blob is never held whole.
func (s *Store) PutSegmentFrom(ctx context.Context, key snapshot.Key, ref snapshot.SegmentRef, r io.Reader) (snapshot.SegmentRef, error) {
	ref.Chunks, ref.StoredBytes = 0, 0
	bp := s.pieces.Get().(*[]byte)
	defer s.pieces.Put(bp)
	buf := *bp
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 || ref.Chunks == 0 && (err == io.EOF || err == io.ErrUnexpectedEOF) {
			pctx, cancel := edge.OpContext(ctx)
			k := segmentKey(key, ref.ID, ref.Chunks)
			_, perr := s.segments.Put(pctx, k, s.sealPiece(key.Namespace, k, buf[:n]))
			cancel()
			if perr != nil {
				s.abandon(key, ref)
				return snapshot.SegmentRef{}, fmt.Errorf("segment %s: piece %d: %w", ref.ID, ref.Chunks, perr)
			}
			ref.Chunks++
			ref.StoredBytes += int64(n)
		}
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return ref, nil
		case err != nil:
			s.abandon(key, ref)
			return snapshot.SegmentRef{}, fmt.Errorf("segment %s: %w", ref.ID, err)
		}
	}
}

// abandon removes the pieces of a segment whose writing failed half way; if that fails too, the
// sweep finds them.
func (s *Store) abandon(key snapshot.Key, ref snapshot.SegmentRef) {
	if ref.Chunks == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), edge.OpTimeout)
	defer cancel()
	_ = s.purgeSegment(ctx, "$KV."+wire.BucketSegment+"."+token(key)+"."+ref.ID+".>")
}

// OpenSegment implements snapshot.Store.
func (s *Store) OpenSegment(ctx context.Context, key snapshot.Key, ref snapshot.SegmentRef) io.Reader {
	return &pieceReader{ctx: ctx, s: s, key: key, ref: ref}
}

// pieceReader reads a segment's blob one stored piece at a time.
type pieceReader struct {
	ctx context.Context
	s   *Store
	key snapshot.Key
	ref snapshot.SegmentRef
	i   int
	cur []byte
	enc bool // whether the segment's pieces are encrypted: piece 0 says (Store.openPiece)
}

func (p *pieceReader) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.i == p.ref.Chunks {
			return 0, io.EOF
		}
		pctx, cancel := edge.OpContext(p.ctx)
		k := segmentKey(p.key, p.ref.ID, p.i)
		data, err := p.s.value(pctx, p.s.segments, p.s.segStream, wire.BucketSegment, k)
		cancel()
		if err == nil {
			data, err = p.s.openPiece(p.key.Namespace, k, p.i, data, &p.enc)
		}
		if err != nil {
			return 0, fmt.Errorf("segment %s: piece %d of %d: %w", p.ref.ID, p.i, p.ref.Chunks, err)
		}
		p.cur = data
		p.i++
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

// DeleteSegment implements snapshot.Store. After the grace period it purges the segment's messages
// from the bucket's stream rather than deleting its keys, which would leave a marker per piece.
func (s *Store) DeleteSegment(ctx context.Context, key snapshot.Key, ref snapshot.SegmentRef) error {
	subject := "$KV." + wire.BucketSegment + "." + token(key) + "." + ref.ID + ".>"
	if s.grace <= 0 {
		return s.purgeSegment(ctx, subject)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pending[subject]; !ok {
		s.pending[subject] = time.AfterFunc(s.grace, func() {
			s.mu.Lock()
			delete(s.pending, subject)
			s.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = s.purgeSegment(ctx, subject) // if it fails, the segment is garbage, never wrong
		})
	}
	return nil
}

func (s *Store) purgeSegment(ctx context.Context, subject string) error {
	ctx, cancel := edge.OpContext(ctx)
	defer cancel()
	return s.segStream.Purge(ctx, jetstream.WithPurgeSubject(subject))
}

// Flush carries out the deletions still waiting for their grace period, at shutdown.
func (s *Store) Flush(ctx context.Context) {
	s.mu.Lock()
	subjects := make([]string, 0, len(s.pending))
	for subj, t := range s.pending {
		if t.Stop() {
			subjects = append(subjects, subj)
		}
		delete(s.pending, subj)
	}
	s.mu.Unlock()
	for _, subj := range subjects {
		_ = s.purgeSegment(ctx, subj)
	}
}

// DeleteSession implements snapshot.Store. Only what was stored before the head was removed is
// purged (a purge bounded by stream sequence), so a new session of the same key started right after
// keeps its records.
func (s *Store) DeleteSession(ctx context.Context, key snapshot.Key, rev uint64, keep *snapshot.Head) error {
	ctx, cancel := edge.OpContext(ctx)
	defer cancel()
	type target struct {
		stream jetstream.Stream
		bucket string
		upTo   uint64
	}
	targets := []*target{{stream: s.verStream, bucket: wire.BucketVersion}, {stream: s.layStream, bucket: wire.BucketLayouts}, {stream: s.segStream, bucket: wire.BucketSegment}}
	for _, t := range targets {
		info, err := t.stream.Info(ctx)
		if err != nil {
			return err
		}
		t.upTo = info.State.LastSeq
	}
	var err error
	if keep != nil {
		var data []byte
		if data, err = json.Marshal(keep); err != nil {
			return err
		}
		_, err = s.heads.Update(ctx, token(key), data, rev)
	} else {
		err = s.heads.Purge(ctx, token(key), jetstream.LastRevision(rev))
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSequence(err) {
		return snapshot.ErrRevisionMismatch
	}
	if err != nil {
		return mapKVErr(err)
	}
	for _, t := range targets {
		if t.upTo == 0 {
			continue
		}
		subject := "$KV." + t.bucket + "." + token(key) + ".>"
		if err := t.stream.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(t.upTo+1)); err != nil {
			return fmt.Errorf("session %s deleted, but purging %s failed (left as garbage): %w", key, t.bucket, err)
		}
	}
	return nil
}

func valueKey(ns, id string) string { return wire.EncodeID(ns) + "." + id }

// ValueEntry implements snapshot.Store; like a head, it is read from the leader when replicated.
func (s *Store) ValueEntry(ctx context.Context, ns, id string) (snapshot.ValueEntry, uint64, error) {
	ctx, cancel := edge.OpContext(ctx)
	defer cancel()
	var e snapshot.ValueEntry
	if s.read.Leader {
		data, rev, err := s.leaderValue(ctx, s.valStream, wire.BucketValues, valueKey(ns, id))
		if err != nil {
			return e, 0, err
		}
		return e, rev, decode(data, &e)
	}
	kve, err := s.values.Get(ctx, valueKey(ns, id))
	if err != nil {
		return e, 0, mapKVErr(err)
	}
	return e, kve.Revision(), decode(kve.Value(), &e)
}

// SwapValueEntry implements snapshot.Store.
func (s *Store) SwapValueEntry(ctx context.Context, e snapshot.ValueEntry, rev uint64) (uint64, error) {
	ctx, cancel := edge.OpContext(ctx)
	defer cancel()
	data, err := json.Marshal(e)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		rev, err = s.values.Create(ctx, valueKey(e.Namespace, e.ID), data)
	} else {
		rev, err = s.values.Update(ctx, valueKey(e.Namespace, e.ID), data, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSequence(err) {
		return 0, snapshot.ErrRevisionMismatch
	}
	return rev, err
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// create writes v under key unless the key exists: the records written so are immutable.
func (s *Store) create(ctx context.Context, kv jetstream.KeyValue, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = kv.Create(ctx, key, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil
	}
	return err
}

func (s *Store) get(ctx context.Context, kv jetstream.KeyValue, stream jetstream.Stream, bucket, key string, v any) error {
	data, err := s.value(ctx, kv, stream, bucket, key)
	if err != nil {
		return err
	}
	return decode(data, v)
}

// value reads an immutable record. A replica that lags may not have a record written a moment ago:
// with replicas, "not found" is asked of the leader again before it is believed.
func (s *Store) value(ctx context.Context, kv jetstream.KeyValue, stream jetstream.Stream, bucket, key string) ([]byte, error) {
	e, err := kv.Get(ctx, key)
	if err == nil {
		return e.Value(), nil
	}
	if err = mapKVErr(err); errors.Is(err, snapshot.ErrNotFound) && s.read.Leader {
		data, _, err := s.leaderValue(ctx, stream, bucket, key)
		return data, err
	}
	return nil, err
}

// scanAll returns the current value of every key of bucket (whose stream is stream) matching
// filter, deleted keys left out.
func scanAll[T any](ctx context.Context, stream jetstream.Stream, bucket, filter string) ([]T, error) {
	var out []T
	pfx := "$KV." + bucket + "."
	err := scanLast(ctx, stream, pfx+filter, false, func(m jetstream.Msg, _ *jetstream.MsgMetadata) error {
		if deleted(m) {
			return nil
		}
		var v T
		if err := decode(m.Data(), &v); err != nil {
			return fmt.Errorf("key %s: %w", strings.TrimPrefix(m.Subject(), pfx), err)
		}
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// deleted reports a KV delete or purge marker.
func deleted(m jetstream.Msg) bool {
	op := m.Headers().Get("KV-Operation")
	return op == "DEL" || op == "PURGE"
}

// scanLast calls fn with the last message of every subject of stream that matches filter (only
// their headers if headersOnly), as a KV watch would deliver its initial values, but pulled in
// batches through one ephemeral consumer. Not a KV watch: a watch is nats.go's push-based ordered
// consumer, which under a read flood crashed the daemon in resetOrderedConsumer (issue 10), and a
// watch abandoned midway (the caller's deadline) left its delivery goroutine blocked for good on
// its full updates channel.
func scanLast(ctx context.Context, stream jetstream.Stream, filter string, headersOnly bool, fn func(jetstream.Msg, *jetstream.MsgMetadata) error) error {
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		FilterSubject:     filter,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       headersOnly,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute, // the server removes it if this daemon dies midway
	})
	if err != nil {
		return err
	}
	defer func() {
		go func() { // nobody waits for the clean-up
			ctx, cancel := context.WithTimeout(context.Background(), edge.OpTimeout)
			defer cancel()
			_ = stream.DeleteConsumer(ctx, cons.CachedInfo().Name)
		}()
	}()
	for pending := cons.CachedInfo().NumPending; pending > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := cons.FetchNoWait(int(min(pending, 256)))
		if err != nil {
			return err
		}
		got := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			got, pending = got+1, meta.NumPending
			if err := fn(m, meta); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if got == 0 { // what was pending was removed meanwhile
			return nil
		}
	}
	return nil
}

func decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: stored record: %v", snapshot.ErrCorrupt, err)
	}
	return nil
}

func mapKVErr(err error) error {
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return snapshot.ErrNotFound
	}
	return err
}
