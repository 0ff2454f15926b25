package edge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/sealing"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// LogStream is the stream the log engine keeps every session in (docs/format.md §8.2).
const LogStream = "CP_LOG"

// OpenLog opens (creating it if missing) the stream CP_LOG and the engine.Log over it. With
// replicas, reads go to the stream's leader, so they see every acknowledged write.
func OpenLog(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, replicas int) (*logstore.Log, jetstream.Stream, error) {
	log, err := logstore.OpenLog(ctx, nc, logstore.LogConfig{Stream: LogStream, Replicas: max(replicas, 1), ReplySilence: OpTimeout})
	if err != nil {
		return nil, nil, err
	}
	st, err := js.Stream(ctx, LogStream)
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", LogStream, err)
	}
	return log, st, nil
}

// Format2Error refuses to serve a server (or cluster) that still holds checkpoints in format 2 (the
// five KV buckets of docs/format.md §2–§6): they must be upgraded first. cmd/checkpointd does that
// at start-up (internal/upgrade, docs/format.md §8.17) before it opens the daemon, unless told not
// to; a program that opens the daemon itself must run internal/upgrade first.
type Format2Error struct{}

func (*Format2Error) Error() string {
	return "this NATS server (or cluster) still holds checkpoints in format 2 (the bucket KV_" + wire.BucketHeads +
		"): upgrade them first (checkpointd does at start-up, unless --no-upgrade; docs/format.md §8.17)"
}

// RefuseFormat2 returns a *Format2Error while format 2's heads bucket exists: the upgrade deletes
// it only once every session is on CP_LOG, so a daemon never serves half of an upgrade.
func RefuseFormat2(ctx context.Context, js jetstream.JetStream) error {
	_, err := js.Stream(ctx, "KV_"+wire.BucketHeads)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil
	case err != nil:
		return err
	}
	return &Format2Error{}
}

// SealLog is where --namespace-keys seal what the engine stores (internal/sealing): with keys, every
// entry's data and every value is sealed with its namespace's key before it reaches the stream, and
// opened when read; the engine never sees it (docs/format.md §8.12a). The log is wrapped without
// keys too (keys nil: everything is stored plain), so that a daemon started without the keys on
// sealed data refuses it as corrupt naming the key it lacks, rather than as bytes that are not an
// entry; it costs the envelope's 45 bytes of each entry's room.
func SealLog(log engine.Log, keys *sealing.Keys) *sealing.Log {
	return sealing.NewLog(log, keys)
}

// OpTimeout bounds one storage operation. A request sent to a stream leader that has just died is
// never answered; giving up after a few seconds and retrying reaches the newly elected one, where
// waiting out the caller's whole deadline would stall every save for that long.
const OpTimeout = 2 * time.Second

func OpContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, OpTimeout)
}

// BoundedLog bounds each request of the log engine to the server by OpTimeout (2 s; a whole Range
// or Sessions page by rangeTimeout), whatever the caller's deadline: a request sent to a stream
// leader that has just died is never answered, and giving up after a few seconds lets the caller
// retry (a save is redelivered; the engine finds it stored if it was) against the newly elected
// leader, where waiting out a save's whole deadline stalled it for 30 s after every leader loss
// (TestCluster_Harness, killing CP_LOG's leader).
type BoundedLog struct {
	engine.Log
	Notes *Notes // when set, Moved is answered from the streams' notes where they know (notes.go)
}

// rangeTimeout bounds a Range (several batched reads, up to a whole 64 MiB conversation), a
// Sessions page and a Lasts (a page's heads).
const rangeTimeout = 10 * time.Second

func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// Moved asks the log only when the notes do not know that key's log is still at seq, and teaches
// them what a question finds (docs/format.md §8.15o).
func (l BoundedLog) Moved(ctx context.Context, key engine.Key, seq uint64) (bool, error) {
	if l.Notes.Still(key, seq) {
		return false, nil
	}
	mark := l.Notes.Begin()
	moved, err := l.Log.Moved(ctx, key, seq)
	if err == nil && !moved {
		l.Notes.Stayed(key, seq, mark)
	}
	return moved, err
}

func (l BoundedLog) Last(ctx context.Context, key engine.Key) (engine.Entry, error) {
	ctx, cancel := bounded(ctx, OpTimeout)
	defer cancel()
	return l.Log.Last(ctx, key)
}

// Lasts is bounded as a Sessions page is: it reads a page's heads, in batched requests.
func (l BoundedLog) Lasts(ctx context.Context, keys []engine.Key) ([]engine.Entry, error) {
	ctx, cancel := bounded(ctx, rangeTimeout)
	defer cancel()
	return l.Log.Lasts(ctx, keys)
}

func (l BoundedLog) Append(ctx context.Context, key engine.Key, data []byte, after uint64) (uint64, error) {
	ctx, cancel := bounded(ctx, OpTimeout)
	defer cancel()
	return l.Log.Append(ctx, key, data, after)
}

func (l BoundedLog) Get(ctx context.Context, key engine.Key, seq uint64) (engine.Entry, error) {
	ctx, cancel := bounded(ctx, OpTimeout)
	defer cancel()
	return l.Log.Get(ctx, key, seq)
}

func (l BoundedLog) Range(ctx context.Context, key engine.Key, from, upTo uint64, fn func(engine.Entry) bool) error {
	ctx, cancel := bounded(ctx, rangeTimeout)
	defer cancel()
	return l.Log.Range(ctx, key, from, upTo, fn)
}

func (l BoundedLog) Sessions(ctx context.Context, ns string, cursor uint64, limit int) ([]engine.Key, uint64, error) {
	ctx, cancel := bounded(ctx, rangeTimeout)
	defer cancel()
	return l.Log.Sessions(ctx, ns, cursor, limit)
}

func (l BoundedLog) PutValue(ctx context.Context, ns, id string, blob []byte) error {
	ctx, cancel := bounded(ctx, OpTimeout)
	defer cancel()
	return l.Log.PutValue(ctx, ns, id, blob)
}

func (l BoundedLog) Value(ctx context.Context, ns, id string) ([]byte, error) {
	ctx, cancel := bounded(ctx, OpTimeout)
	defer cancel()
	return l.Log.Value(ctx, ns, id)
}

var _ engine.DataReader = BoundedLog{}

// ReadData passes the engine's reads without sequences (engine.DataReader) to the log, bounded
// like a Range.
func (l BoundedLog) ReadData(ctx context.Context, key engine.Key, after uint64, n int, fn func(data []byte) bool) error {
	ctx, cancel := bounded(ctx, rangeTimeout)
	defer cancel()
	return engine.ReadData(ctx, l.Log, key, after, n, fn)
}

var _ engine.Creator = BoundedLog{}

// Create passes a first save's creation (engine.Creator) to the log: what it publishes first is
// bounded like the Append it precedes, and so is the Append that ends it.
func (l BoundedLog) Create(ctx context.Context, key engine.Key) engine.Creation {
	ctx, cancel := bounded(ctx, OpTimeout)
	return boundedCreation{inner: engine.Create(ctx, l.Log, key), cancel: cancel}
}

// boundedCreation bounds each request of a creation by OpTimeout; cancel ends the bound of what
// Create began.
type boundedCreation struct {
	inner  engine.Creation
	cancel context.CancelFunc
}

func (c boundedCreation) Append(ctx context.Context, data []byte) (uint64, error) {
	defer c.cancel()
	ctx, cancel := bounded(ctx, OpTimeout)
	defer cancel()
	return c.inner.Append(ctx, data)
}

func (c boundedCreation) Abandon(ctx context.Context) error {
	defer c.cancel()
	ctx, cancel := bounded(ctx, OpTimeout)
	defer cancel()
	return c.inner.Abandon(ctx)
}
