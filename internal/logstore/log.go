package logstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/pieces"
)

// Log is engine.Log over one JetStream stream (docs/format.md §8.2):
//
//	cp.log.<ns>.<session>.<agent>  a session's entries, appended with Nats-Expected-Last-Subject-Sequence
//	cp.idx.<ns>                    the namespace's sessions in creation order, one entry per session
//	                               (its "<session>.<agent>" tokens), written before its first entry
//	cp.val.<ns>.<id>               a value, created once with Nats-Expected-Last-Subject-Sequence 0
//
// Every id is a subject token encoded with wire.EncodeID, so no id a client chooses can add a
// token or a wildcard to a subject. It knows nothing of what an entry says: the engine
// (internal/engine) decides that.
type Log struct {
	nc     *nats.Conn
	stream jetstream.Stream
	cfg    LogConfig
	// batchedGets: the server answers batched direct gets (nats-server ≥ 2.11); older servers are
	// read one direct get per entry.
	batchedGets bool
	// legacyIndex: the server is older than 2.11, whose filestore can lose track of a subject's
	// messages after deletes (nats-server 2.9.10 and 2.10.0 `removeSeqPerSubject`: deleting the
	// subject's last message in a block leaves that block's `Last` on it, and once one message of
	// the subject is left there, `First` is set to that stale `Last`, so next_by_subj reads skip
	// the live message; seen here as a listing that lost a session after a creation race). On
	// such servers index entries are never deleted: Sessions checks each against the log it names
	// instead (indexEntryHolds). That 2.11 also brought batched gets is a coincidence: the two
	// are separate facts.
	legacyIndex bool
	// upToDate is the replica that answers reads that must see every acknowledged write (Last,
	// Get, Value, the end of a Range or a Sessions page): the stream leader on a replicated
	// stream, or with LeaderReads.
	upToDate replica
	// indexGrace: a Purge of an empty log keeps the index entries younger than this
	// (creationGrace; tests lower it).
	indexGrace time.Duration
	maxEntry   int
	// beforeFirstEntry, set by tests, runs in a creation between its two writes (index entry,
	// first entry): an error it returns fails the first entry as if its publish had (not sent).
	beforeFirstEntry func() error
	// beforeUnlistDelete, set by tests, runs in a refused creation on an empty log between its
	// read of the log's first entry and its delete of its index entry.
	beforeUnlistDelete func()
}

// LogConfig configures a Log. The zero value of each field picks its default.
type LogConfig struct {
	Stream   string // default "CP_LOG"
	Replicas int    // default 1
	// LeaderReads sends Last, Get, Value and the end of every Range and Sessions page to the
	// stream leader ($JS.API.STREAM.MSG.GET), so that they see every acknowledged write; direct
	// gets may be answered by a replica that is behind. Implied by Replicas > 1.
	LeaderReads bool
	// Timeout bounds each request to the server when the caller's context has no deadline
	// (default 10 s).
	Timeout time.Duration
	// ReplySilence, when set, bounds each wait for the server's next reply message within the
	// caller's deadline: a get's reply, and each message of a batched get's. A replica that dies
	// while it answers (or before) never sends it, and a read of many entries, bounded as a whole
	// by seconds, would otherwise wait all of them out before its caller could try again.
	ReplySilence time.Duration
}

const (
	// rangeBatch and rangeBytes bound one batched direct get of Range: the server stops after
	// this many entries, or after the entry that reaches this many bytes, so a batch holds at
	// most rangeBytes + MaxEntry bytes.
	rangeBatch = 1024
	rangeBytes = 8 << 20
	// maxPage is the most keys one Sessions page returns (a larger limit is split into pages).
	maxPage = 1024
	// creationGrace is how long after its index entry a creation's first entry may still land: a
	// Purge of an empty log keeps the index entries younger than this (Log.indexEntries). A
	// creation sends its first entry right after its index entry was acknowledged; 10 minutes
	// covers a publish held in the client's buffer while it reconnects (nats.go's default: 60
	// attempts 2 s apart), with room.
	creationGrace = 10 * time.Minute
	// indexHeader, on a log's first entry, names the sequence of its index entry (Purge).
	indexHeader = "Cp-Index"
	apiPrefix   = "$JS.API."
)

var (
	_ engine.Log     = (*Log)(nil)
	_ engine.Creator = (*Log)(nil)
)

// OpenLog creates (or updates) the stream and returns a Log on it.
func OpenLog(ctx context.Context, nc *nats.Conn, cfg LogConfig) (*Log, error) {
	cfg = cfg.withDefaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st, err := js.CreateOrUpdateStream(ctx, LogStreamConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("logstore: creating stream %s: %w", cfg.Stream, err)
	}
	l := &Log{nc: nc, stream: st, cfg: cfg, maxEntry: int(pieces.Size(nc.MaxPayload(), pieces.EntryRoom)),
		batchedGets: serverAtLeast(nc, 2, 11), legacyIndex: !serverAtLeast(nc, 2, 11), upToDate: anyReplica,
		indexGrace: creationGrace}
	if cfg.LeaderReads || cfg.Replicas > 1 {
		l.upToDate = leaderOnly
	}
	return l, nil
}

// serverAtLeast reports whether the connected server's version is at least major.minor.
func serverAtLeast(nc *nats.Conn, major, minor int) bool {
	var ma, mi, pa int
	if _, err := fmt.Sscanf(nc.ConnectedServerVersion(), "%d.%d.%d", &ma, &mi, &pa); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

func (c LogConfig) withDefaults() LogConfig {
	if c.Stream == "" {
		c.Stream = "CP_LOG"
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	return c
}

// LogStreamConfig is the stream of docs/format.md §8.2: file storage, nothing expires or is
// discarded by itself (discard new: a full stream refuses writes), direct gets on every replica.
func LogStreamConfig(cfg LogConfig) jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	return jetstream.StreamConfig{
		Name:        cfg.Stream,
		Subjects:    []string{LogSubjectPrefix + ">", "cp.idx.>", "cp.val.>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		Replicas:    cfg.Replicas,
		AllowDirect: true,
		// The headers of every entry, republished: a daemon learns of appends without asking
		// (docs/format.md §8.15o, internal/transfer/edge/notes.go).
		RePublish: new(NoteRePublish),
	}
}

// NoteRePublish is the stream's republish setting: the headers of every session log entry.
var NoteRePublish = jetstream.RePublish{Source: LogSubjectPrefix + ">", Destination: NotePrefix + ">", HeadersOnly: true}

// NotePrefix is where the stream republishes the headers of each entry it stores (Nats-Subject,
// Nats-Sequence, no data): "$log" is never an encoded namespace.
const NotePrefix = "cp.note.$log."

// MaxEntry is the server's max_payload less room for the headers an Append adds.
func (l *Log) MaxEntry() int { return l.maxEntry }

// silence bounds ctx by ReplySilence, for one wait for a reply message.
func (l *Log) silence(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.cfg.ReplySilence <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.cfg.ReplySilence)
}

// withTimeout gives ctx the configured timeout when it has no deadline of its own.
func (l *Log) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.cfg.Timeout)
}

func (l *Log) Last(ctx context.Context, key engine.Key) (engine.Entry, error) {
	subject, err := LogSubject(key)
	if err != nil {
		return engine.Entry{}, err
	}
	m, err := l.get(ctx, getRequest{LastFor: subject}, l.upToDate)
	if err != nil {
		return engine.Entry{}, fmt.Errorf("logstore: last entry of %s: %w", subject, err)
	}
	return engine.Entry{Seq: m.seq, Data: m.data}, nil
}

// Moved asks for key's first entry after seq (a get with next_by_subj), from the replica that
// Last asks (Log.upToDate: the leader on a replicated stream, so that a replica that lags never
// answers "none" for an entry it has not applied yet): a 404 when there is none, a few bytes
// however large the entry at seq.
func (l *Log) Moved(ctx context.Context, key engine.Key, seq uint64) (bool, error) {
	subject, err := LogSubject(key)
	if err != nil {
		return false, err
	}
	m, err := l.get(ctx, getRequest{Seq: seq + 1, NextFor: subject}, l.upToDate)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("logstore: entries of %s after %d: %w", subject, seq, err)
	case m.subject != subject: // the server filters by subject; never trust another's message
		return false, fmt.Errorf("logstore: entries of %s after %d: the get returned %s's message %d", subject, seq, m.subject, m.seq)
	}
	return true, nil
}

func (l *Log) Get(ctx context.Context, key engine.Key, seq uint64) (engine.Entry, error) {
	subject, err := LogSubject(key)
	if err != nil {
		return engine.Entry{}, err
	}
	if seq == 0 {
		return engine.Entry{}, fmt.Errorf("logstore: %s entry 0: %w", subject, engine.ErrNotFound)
	}
	m, err := l.get(ctx, getRequest{Seq: seq}, l.upToDate)
	if err == nil && m.subject != subject { // another log's entry
		err = engine.ErrNotFound
	}
	if err != nil {
		return engine.Entry{}, fmt.Errorf("logstore: %s entry %d: %w", subject, seq, err)
	}
	return engine.Entry{Seq: m.seq, Data: m.data}, nil
}

func (l *Log) Append(ctx context.Context, key engine.Key, data []byte, after uint64) (uint64, error) {
	subject, err := LogSubject(key)
	if err != nil {
		return 0, err
	}
	if len(data) > l.maxEntry {
		return 0, fmt.Errorf("logstore: appending %d bytes to %s: %w (max %d)", len(data), subject, engine.ErrTooLarge, l.maxEntry)
	}
	if after > 0 {
		return l.publish(ctx, subject, data, lastSeqIs(after), nil)
	}
	return l.create(ctx, key, subject, data)
}

func (l *Log) Delete(ctx context.Context, key engine.Key, seqs ...uint64) error {
	subject, err := LogSubject(key)
	if err != nil || len(seqs) == 0 {
		return err
	}
	last, err := l.Last(ctx, key)
	if errors.Is(err, engine.ErrNotFound) {
		return nil // an empty log has nothing to delete
	}
	if err != nil {
		return err
	}
	if slices.Contains(seqs, last.Seq) {
		return fmt.Errorf("logstore: %s: entry %d is the log's last and is never deleted (its compare-and-swap would move back)", subject, last.Seq)
	}
	// STREAM.MSG.DELETE takes any sequence of the stream: delete only those that are entries of
	// this log, as a read of the log between the lowest and the highest says.
	want := slices.Clone(seqs)
	slices.Sort(want)
	var own []uint64
	err = l.scan(ctx, subject, max(want[0], 1), want[len(want)-1], rangeBatch, func(m msg) bool {
		if _, ok := slices.BinarySearch(want, m.seq); ok {
			own = append(own, m.seq)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("logstore: deleting entries of %s: %w", subject, err)
	}
	if err := l.deleteSeqs(ctx, own); err != nil {
		return fmt.Errorf("logstore: deleting entries of %s: %w", subject, err)
	}
	return nil
}

// deleteSeqs deletes messages by sequence, all requests sent at once
// ($JS.API.STREAM.MSG.DELETE with no_erase: the bytes stay in their block until JetStream drops
// or compacts it, docs/format.md §8.8). Messages already gone are skipped: the server answers
// 10043 for one deleted inside a block, and 10057 "no message found" for one below the stream's
// first sequence or in a block already removed (another daemon's delete, a second Purge). Each
// request has its own reply subject (<inbox>.<seq>), so that an error names its sequence.
func (l *Log) deleteSeqs(ctx context.Context, seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	inbox := l.nc.NewRespInbox()
	sub, err := l.nc.SubscribeSync(inbox + ".*")
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	api := apiPrefix + "STREAM.MSG.DELETE." + l.cfg.Stream
	for _, seq := range seqs {
		n := strconv.FormatUint(seq, 10)
		if err := l.nc.PublishRequest(api, inbox+"."+n, []byte(`{"seq":`+n+`,"no_erase":true}`)); err != nil {
			return fmt.Errorf("deleting message %d of stream %s: %w", seq, l.cfg.Stream, err)
		}
	}
	var errs []error
	for range seqs {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("waiting for %d deletes on stream %s: %w", len(seqs), l.cfg.Stream, unavailable(err)))...)
		}
		if err := apiReply(m, nil); err != nil && !errors.Is(err, engine.ErrNotFound) {
			errs = append(errs, fmt.Errorf("deleting message %s of stream %s: %w", strings.TrimPrefix(m.Subject, inbox+"."), l.cfg.Stream, err))
		}
	}
	return errors.Join(errs...)
}

// Purge removes key's log, then its index entries (indexEntries): the other order could leave,
// after a crash, a log no listing shows. On a replicated stream it then moves the stream's last
// sequence past the purge (markPurged), so that Lasts reflects it at once.
func (l *Log) Purge(ctx context.Context, key engine.Key) error {
	subject, err := LogSubject(key)
	if err != nil {
		return err
	}
	var idxSeqs []uint64
	if !l.legacyIndex {
		if idxSeqs, err = l.indexEntries(ctx, key, subject); err != nil {
			return fmt.Errorf("logstore: purging %s: finding its index entry: %w", subject, err)
		}
	}
	ctx2, cancel := l.withTimeout(ctx)
	defer cancel()
	if err := l.stream.Purge(ctx2, jetstream.WithPurgeSubject(subject)); err != nil {
		return fmt.Errorf("logstore: purging %s: %w", subject, err)
	}
	if err := l.deleteSeqs(ctx, idxSeqs); err != nil {
		return fmt.Errorf("logstore: purging %s: deleting its index entries %v: %w", subject, idxSeqs, err)
	}
	if l.upToDate == leaderOnly {
		if err := l.markPurged(ctx, subject); err != nil {
			return fmt.Errorf("logstore: purging %s: %w", subject, err)
		}
	}
	return nil
}

// purgedSubject holds the last purge's mark on a replicated stream (markPurged). It is no log's
// subject: those have five tokens of wire.EncodeID's alphabet, this one three and a "$" (as the
// upgrade's marker, cp.log.$upgrade), and nothing that lists sessions or namespaces reads it
// (cp.idx.*, cp.val.*.*).
const purgedSubject = "cp.log.$purged"

// markPurged publishes on purgedSubject, after a purge of subject, and keeps only that message
// there. A purge (or a delete) is no message: the stream's last sequence does not move, and a
// replica that had every message but had not applied the purge yet still shows the purged log's
// last entry as its head, taken at the leader's last sequence (Nats-UpTo-Sequence), which is how
// Lasts judges a replica current. A replica applies the stream's operations in order, so one
// that has this message has applied the purge before it: Lasts, which asks the leader for its
// last sequence first, then takes no head of the purged log from a replica behind. Only a
// replicated stream needs it (Log.upToDate); the message is never read.
func (l *Log) markPurged(ctx context.Context, subject string) error {
	seq, err := l.publish(ctx, purgedSubject, []byte(subject), anyLastSeq, nil)
	if err != nil {
		return fmt.Errorf("marking the purge on %s: %w", purgedSubject, err)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	// The marks before this one mark nothing any more: keep one (the newest, whichever daemon
	// wrote it).
	if err := l.stream.Purge(ctx, jetstream.WithPurgeSubject(purgedSubject), jetstream.WithPurgeKeep(1)); err != nil {
		return fmt.Errorf("removing the marks before %d on %s: %w", seq, purgedSubject, err)
	}
	return nil
}
