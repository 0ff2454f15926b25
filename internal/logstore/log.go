package logstore

import (
	"bytes"
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
	"github.com/checkpointd/checkpointd/internal/wire"
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
	// batch: the server answers batched direct gets (nats-server ≥ 2.11); older servers are read
	// one direct get per entry.
	batch bool
	// leader: reads that must see every acknowledged write go to the stream leader.
	leader   bool
	maxEntry int
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
}

const (
	// headerRoom is what MaxEntry leaves of the server's max_payload for the headers an Append
	// adds (Nats-Expected-Last-Subject-Sequence and Cp-Index: ~90 bytes).
	headerRoom = 1024
	// rangeBatch and rangeBytes bound one batched direct get of Range: the server stops after
	// this many entries, or after the entry that reaches this many bytes, so a batch holds at
	// most rangeBytes + MaxEntry bytes.
	rangeBatch = 1024
	rangeBytes = 8 << 20
	// maxPage is the most keys one Sessions page returns (a larger limit is split into pages).
	maxPage = 1024
	// indexHeader, on a log's first entry, names the sequence of its index entry (Purge).
	indexHeader = "Cp-Index"
	apiPrefix   = "$JS.API."
)

var _ engine.Log = (*Log)(nil)

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
	return &Log{nc: nc, stream: st, cfg: cfg, batch: serverAtLeast(nc, 2, 11),
		leader: cfg.LeaderReads || cfg.Replicas > 1, maxEntry: max(int(nc.MaxPayload())-headerRoom, 0)}, nil
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
		Subjects:    []string{"cp.log.>", "cp.idx.>", "cp.val.>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		Replicas:    cfg.Replicas,
		AllowDirect: true,
	}
}

// The subjects. Each id is validated (wire.ValidateID: non-empty UTF-8 of at most 256 bytes)
// and encoded (wire.EncodeID: one token of [A-Za-z0-9_-=]).

func logSubject(k engine.Key) (string, error) {
	wk := wire.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
	if err := wk.Validate(); err != nil {
		return "", fmt.Errorf("logstore: key %s: %w", k, err)
	}
	return "cp.log." + wk.Token(), nil
}

func indexSubject(ns string) (string, error) {
	if err := wire.ValidateID(ns); err != nil {
		return "", fmt.Errorf("logstore: namespace %q: %w", ns, err)
	}
	return "cp.idx." + wire.EncodeID(ns), nil
}

// indexToken is what a session's index entry holds: its "<session>.<agent>" tokens.
func indexToken(k engine.Key) string { return wire.EncodeID(k.Session) + "." + wire.EncodeID(k.Agent) }

// valueSubject: value ids are ids like any other (the engine names values by their SHA-256 in
// hex, which EncodeID leaves as it is), so a client-chosen id never reaches a subject raw.
func valueSubject(ns, id string) (string, error) {
	if err := wire.ValidateID(ns); err != nil {
		return "", fmt.Errorf("logstore: value namespace %q: %w", ns, err)
	}
	if err := wire.ValidateID(id); err != nil {
		return "", fmt.Errorf("logstore: value id %q: %w", id, err)
	}
	return "cp.val." + wire.EncodeID(ns) + "." + wire.EncodeID(id), nil
}

// MaxEntry is the server's max_payload less room for the headers an Append adds.
func (l *Log) MaxEntry() int { return l.maxEntry }

// withTimeout gives ctx the configured timeout when it has no deadline of its own.
func (l *Log) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.cfg.Timeout)
}

func (l *Log) Last(ctx context.Context, key engine.Key) (engine.Entry, error) {
	subject, err := logSubject(key)
	if err != nil {
		return engine.Entry{}, err
	}
	m, err := l.get(ctx, getRequest{LastFor: subject}, l.leader)
	if err != nil {
		return engine.Entry{}, fmt.Errorf("logstore: last entry of %s: %w", subject, err)
	}
	return engine.Entry{Seq: m.seq, Data: m.data}, nil
}

func (l *Log) Get(ctx context.Context, key engine.Key, seq uint64) (engine.Entry, error) {
	subject, err := logSubject(key)
	if err != nil {
		return engine.Entry{}, err
	}
	if seq == 0 {
		return engine.Entry{}, fmt.Errorf("logstore: %s entry 0: %w", subject, engine.ErrNotFound)
	}
	m, err := l.get(ctx, getRequest{Seq: seq}, l.leader)
	if err == nil && m.subject != subject { // another log's entry
		err = engine.ErrNotFound
	}
	if err != nil {
		return engine.Entry{}, fmt.Errorf("logstore: %s entry %d: %w", subject, seq, err)
	}
	return engine.Entry{Seq: m.seq, Data: m.data}, nil
}

func (l *Log) Append(ctx context.Context, key engine.Key, data []byte, after uint64) (uint64, error) {
	subject, err := logSubject(key)
	if err != nil {
		return 0, err
	}
	if len(data) > l.maxEntry {
		return 0, fmt.Errorf("logstore: appending %d bytes to %s: %w (max %d)", len(data), subject, engine.ErrTooLarge, l.maxEntry)
	}
	if after > 0 {
		return l.publish(ctx, subject, data, after, nil)
	}
	return l.create(ctx, key, subject, data)
}

// create appends a log's first entry: its index entry first, so that a crash between the two
// leaves a listed session with an empty log (which Sessions' callers skip) rather than a session
// nobody can list. A creation that loses its compare-and-swap (another creator won, or the log
// already existed) deletes the index entry it wrote: the winner wrote its own.
func (l *Log) create(ctx context.Context, key engine.Key, subject string, data []byte) (uint64, error) {
	idx, _ := indexSubject(key.Namespace) // the key is valid
	idxSeq, err := l.publish(ctx, idx, []byte(indexToken(key)), 0, nil)
	if err != nil {
		return 0, fmt.Errorf("logstore: listing %s: %w", subject, err)
	}
	hdr := nats.Header{indexHeader: []string{strconv.FormatUint(idxSeq, 10)}}
	seq, err := l.publish(ctx, subject, data, 0, hdr)
	if errors.Is(err, engine.ErrConflict) && !l.legacyIndex() {
		if derr := l.deleteSeqs(ctx, []uint64{idxSeq}); derr != nil {
			err = errors.Join(err, fmt.Errorf("logstore: its index entry %d on %s stays: %w", idxSeq, idx, derr))
		}
	}
	return seq, err
}

// publish stores data on subject with Nats-Expected-Last-Subject-Sequence = after (0: the
// subject must be empty), except on an index subject (cp.idx.<ns>, shared by the namespace's
// sessions), and returns its sequence.
//
// A clustered stream's leader also refuses a write whose subject has another write in process
// (proposed, not yet applied: nats-server's expectedPerSubjectInProcess and inflight checks),
// with 10164 and no last sequence, whatever after says. The conformance suite met it with one
// writer appending in sequence, right after its previous append was acknowledged. So on 10164 the
// leader is asked for the subject's last sequence: if it is still after, the write is tried again
// (the refusal came before anything was proposed); otherwise it is a lost compare-and-swap.
func (l *Log) publish(ctx context.Context, subject string, data []byte, after uint64, hdr nats.Header) (uint64, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	for attempt := 1; ; attempt++ {
		seq, err := l.publishOnce(ctx, subject, data, after, hdr)
		if !errors.Is(err, errInProcess) {
			return seq, err
		}
		last, gerr := l.get(ctx, getRequest{LastFor: subject}, true)
		if errors.Is(gerr, engine.ErrNotFound) {
			last.seq, gerr = 0, nil
		}
		switch {
		case gerr != nil:
			return 0, errors.Join(err, fmt.Errorf("logstore: reading the last sequence of %s: %w", subject, gerr))
		case last.seq != after:
			return 0, fmt.Errorf("%w (the last is %d)", err, last.seq)
		case attempt == 100:
			return 0, fmt.Errorf("%w (100 attempts)", err)
		}
		select {
		case <-ctx.Done():
			return 0, errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(min(attempt, 10)) * time.Millisecond):
		}
	}
}

// publishOnce is one publish of publish.
func (l *Log) publishOnce(ctx context.Context, subject string, data []byte, after uint64, hdr nats.Header) (uint64, error) {
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	for k, v := range hdr {
		m.Header[k] = v
	}
	if !strings.HasPrefix(subject, "cp.idx.") {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(after, 10))
	}
	resp, err := l.nc.RequestMsgWithContext(ctx, m)
	if errors.Is(err, nats.ErrMaxPayload) {
		return 0, fmt.Errorf("logstore: %s: %w: %v", subject, engine.ErrTooLarge, err)
	}
	if err != nil {
		return 0, fmt.Errorf("logstore: publishing to %s: %w", subject, err)
	}
	var ack struct {
		Seq uint64 `json:"seq"`
	}
	if err := apiReply(resp, &ack); err != nil {
		return 0, fmt.Errorf("logstore: publishing to %s: %w", subject, err)
	}
	if ack.Seq == 0 {
		return 0, fmt.Errorf("logstore: publishing to %s: ack without a sequence %.200q", subject, resp.Data)
	}
	return ack.Seq, nil
}

// errInProcess marks 10164 (see publish).
var errInProcess = errors.New("another write to the subject is in process")

// apiError is a JetStream API error reply.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     uint16 `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (JetStream %d/%d)", e.Description, e.Code, e.ErrCode)
}

// JetStream error codes (nats-server's errors.json).
const (
	errCodeWrongLastSequence = 10071
	// errCodeWrongLastSequenceClustered: "wrong last sequence" without the last sequence
	// (JSStreamWrongLastSequenceConstantErr), what a clustered stream answers when the subject has
	// a write in process (publish).
	errCodeWrongLastSequenceClustered = 10164
	errCodeNoMessageFound             = 10037
	errCodeSequenceNotFound           = 10043
	errCodeMessageTooLarge            = 10054
)

// mapped wraps the engine's error that the code stands for, if any.
func (e *apiError) mapped() error {
	switch e.ErrCode {
	case errCodeWrongLastSequence:
		return fmt.Errorf("%w: %v", engine.ErrConflict, e)
	case errCodeWrongLastSequenceClustered:
		return fmt.Errorf("%w: %w: %v", engine.ErrConflict, errInProcess, e)
	case errCodeNoMessageFound, errCodeSequenceNotFound:
		return fmt.Errorf("%w: %v", engine.ErrNotFound, e)
	case errCodeMessageTooLarge:
		return fmt.Errorf("%w: %v", engine.ErrTooLarge, e)
	}
	return e
}

func (l *Log) Range(ctx context.Context, key engine.Key, from, upTo uint64, fn func(engine.Entry) bool) error {
	subject, err := logSubject(key)
	if err != nil {
		return err
	}
	err = l.scan(ctx, subject, max(from, 1), upTo, rangeBatch, func(m msg) bool {
		return fn(engine.Entry{Seq: m.seq, Data: m.data})
	})
	if err != nil {
		return fmt.Errorf("logstore: reading %s: %w", subject, err)
	}
	return nil
}

// scan calls fn with subject's messages whose sequence is in [from, upTo] (upTo 0: no bound),
// in order, until fn returns false. It reads with batched direct gets of up to batch messages
// (nats-server ≥ 2.11; one direct get per message before), from any replica. On a replicated stream a replica may be
// behind the leader: it has every message up to some point and none after, so when the replica
// says there is no more, the leader is asked for the next message (one STREAM.MSG.GET); if it
// has one, the scan goes on from it. So a scan sees every message acknowledged before it began
// (read-your-writes), and a scan up to a known sequence reads that far, unless the message is
// gone (deleted or purged).
func (l *Log) scan(ctx context.Context, subject string, from, upTo uint64, batch int, fn func(msg) bool) error {
	for upTo == 0 || from <= upTo {
		last, more, stopped, err := l.scanBatch(ctx, subject, from, upTo, batch, fn)
		if err != nil || stopped {
			return err
		}
		if last > 0 {
			from = last + 1
		}
		if more && last > 0 { // (more without a message would not move on)
			continue
		}
		if !l.leader || (upTo > 0 && from > upTo) {
			return nil
		}
		m, err := l.get(ctx, getRequest{Seq: from, NextFor: subject}, true)
		if errors.Is(err, engine.ErrNotFound) || err == nil && upTo > 0 && m.seq > upTo {
			return nil
		}
		if err != nil {
			return err
		}
		if !fn(m) {
			return nil
		}
		from = m.seq + 1
	}
	return nil
}

// scanBatch reads one batch from from on: it returns the last sequence it passed to fn, whether
// the server has more after it, and whether fn stopped the scan.
func (l *Log) scanBatch(ctx context.Context, subject string, from, upTo uint64, batch int, fn func(msg) bool) (last uint64, more, stopped bool, err error) {
	n := batch
	if upTo > 0 && upTo-from < uint64(n) { // sequences are stream-wide: at most this many
		n = int(upTo-from) + 1
	}
	req := getRequest{Seq: from, NextFor: subject}
	if l.batch {
		req.Batch, req.MaxBytes = n, rangeBytes
	}
	var ferr error
	more, err = l.directBatchMore(ctx, req, func(m msg) bool {
		if m.subject != subject { // the server filters by subject; never pass on another's
			ferr = fmt.Errorf("direct get from %d returned %s's message %d", from, m.subject, m.seq)
			return false
		}
		if upTo > 0 && m.seq > upTo {
			stopped = true
			return false
		}
		last = m.seq
		if !fn(m) {
			stopped = true
			return false
		}
		return true
	})
	if err == nil {
		err = ferr
	}
	if stopped || err != nil {
		return last, false, stopped, err
	}
	if !l.batch && last > 0 {
		more = true // one at a time: ask again until the server says there is none
	}
	return last, more, false, nil
}

func (l *Log) Delete(ctx context.Context, key engine.Key, seqs ...uint64) error {
	subject, err := logSubject(key)
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
// or compacts it, docs/format.md §8.8). Messages already gone are skipped.
func (l *Log) deleteSeqs(ctx context.Context, seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	inbox := l.nc.NewRespInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	for _, seq := range seqs {
		req := []byte(`{"seq":` + strconv.FormatUint(seq, 10) + `,"no_erase":true}`)
		if err := l.nc.PublishRequest(apiPrefix+"STREAM.MSG.DELETE."+l.cfg.Stream, inbox, req); err != nil {
			return err
		}
	}
	var errs []error
	for range seqs {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("waiting for %d deletes: %w", len(seqs), err))...)
		}
		if err := apiReply(m, nil); err != nil && !errors.Is(err, engine.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Purge removes key's log, then its index entries: the other order could leave, after a crash,
// a log no listing shows. Its index entry is found by the log's first entry (Cp-Index), or,
// once that entry was deleted (a pack), by reading the namespace's index up to the log's first
// entry, which every index entry of the log precedes; that read is O(sessions created before it).
func (l *Log) Purge(ctx context.Context, key engine.Key) error {
	subject, err := logSubject(key)
	if err != nil {
		return err
	}
	var idxSeqs []uint64
	if !l.legacyIndex() {
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
	return nil
}

// indexEntries returns the sequences of key's entries on its namespace's index.
func (l *Log) indexEntries(ctx context.Context, key engine.Key, subject string) ([]uint64, error) {
	idx, _ := indexSubject(key.Namespace)
	token := []byte(indexToken(key))
	var bound uint64 // every index entry of the log precedes its first entry
	first, err := l.get(ctx, getRequest{Seq: 1, NextFor: subject}, l.leader)
	switch {
	case errors.Is(err, engine.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		bound = first.seq
		if seq, perr := strconv.ParseUint(first.header.Get(indexHeader), 10, 64); perr == nil && seq > 0 {
			m, err := l.get(ctx, getRequest{Seq: seq}, l.leader)
			if err == nil && m.subject == idx && bytes.Equal(m.data, token) {
				return []uint64{seq}, nil
			}
		}
	}
	var seqs []uint64
	err = l.scan(ctx, idx, 1, bound, rangeBatch, func(m msg) bool {
		if bytes.Equal(m.data, token) {
			seqs = append(seqs, m.seq)
		}
		return true
	})
	return seqs, err
}

func (l *Log) Sessions(ctx context.Context, ns string, cursor uint64, limit int) ([]engine.Key, uint64, error) {
	idx, err := indexSubject(ns)
	if err != nil {
		return nil, 0, err
	}
	if limit <= 0 {
		return nil, 0, fmt.Errorf("logstore: sessions of %q: a page of %d keys", ns, limit)
	}
	limit = min(limit, maxPage)
	var keys []engine.Key
	var next uint64
	var bad error
	err = l.scan(ctx, idx, max(cursor, 1), 0, limit+1, func(m msg) bool { // one more: is there a next page?
		if len(keys) == limit {
			next = m.seq // there is more, from here
			return false
		}
		k, err := parseIndexEntry(ns, m.data)
		if err != nil {
			bad = fmt.Errorf("index entry %d: %w", m.seq, err)
			return false
		}
		if l.legacyIndex() {
			listed, err := l.indexEntryHolds(ctx, k, m.seq)
			if err != nil {
				bad = fmt.Errorf("index entry %d: %w", m.seq, err)
				return false
			}
			if !listed {
				return true
			}
		}
		keys = append(keys, k)
		return true
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return nil, 0, fmt.Errorf("logstore: sessions of %q: %w", ns, err)
	}
	return keys, next, nil
}

// legacyIndex: the server is older than 2.11, whose filestore can lose track of a subject's
// messages after deletes (nats-server 2.9.10 and 2.10.0 `removeSeqPerSubject`: deleting the
// subject's last message in a block leaves that block's `Last` on it, and once one message of the
// subject is left there, `First` is set to that stale `Last`, so next_by_subj reads skip the live
// message; seen here as a listing that lost a session after a creation race). On such servers
// index entries are never deleted: Sessions checks each against the log it names instead
// (indexEntryHolds).
func (l *Log) legacyIndex() bool { return !l.batch }

// indexEntryHolds reports whether index entry seq lists k (legacy servers, which keep index
// entries of lost creations and purged logs): k's log must have entries, and its first entry, if
// it still names its index entry (Cp-Index), must name this one. A log whose first entry was
// deleted (packed) cannot tell, and is listed: a key re-created after a purge, or created by
// racing creators, may then be listed more than once on such a server.
func (l *Log) indexEntryHolds(ctx context.Context, k engine.Key, seq uint64) (bool, error) {
	subject, _ := logSubject(k)
	first, err := l.get(ctx, getRequest{Seq: 1, NextFor: subject}, l.leader)
	if errors.Is(err, engine.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	named, perr := strconv.ParseUint(first.header.Get(indexHeader), 10, 64)
	return perr != nil || named == seq, nil
}

func parseIndexEntry(ns string, data []byte) (engine.Key, error) {
	session, agent, ok := strings.Cut(string(data), ".")
	if !ok {
		return engine.Key{}, fmt.Errorf("%w: %.100q is not <session>.<agent>", wire.ErrInvalidID, data)
	}
	k := engine.Key{Namespace: ns}
	var err error
	if k.Session, err = wire.DecodeID(session); err != nil {
		return engine.Key{}, err
	}
	if k.Agent, err = wire.DecodeID(agent); err != nil {
		return engine.Key{}, err
	}
	return k, nil
}

// Namespaces lists the subjects of the namespaces' indexes (STREAM.INFO, one subject per
// namespace: O(namespaces)). A namespace whose every session was purged has no index entry left,
// and is not listed.
func (l *Log) Namespaces(ctx context.Context) ([]string, error) {
	subjects, err := l.subjects(ctx, "cp.idx.*")
	if err != nil {
		return nil, fmt.Errorf("logstore: namespaces: %w", err)
	}
	var out []string
	for _, s := range subjects {
		ns, err := wire.DecodeID(strings.TrimPrefix(s, "cp.idx."))
		if err != nil {
			return nil, fmt.Errorf("logstore: namespaces: subject %q: %w", s, err)
		}
		out = append(out, ns)
	}
	slices.Sort(out)
	return out, nil
}

// subjects returns the stream's subjects that match filter and hold a message.
func (l *Log) subjects(ctx context.Context, filter string) ([]string, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	info, err := l.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(info.State.Subjects))
	for s := range info.State.Subjects {
		out = append(out, s)
	}
	return out, nil
}

func (l *Log) PutValue(ctx context.Context, ns, id string, blob []byte) error {
	subject, err := valueSubject(ns, id)
	if err != nil {
		return err
	}
	if len(blob) > l.maxEntry {
		return fmt.Errorf("logstore: value %s: %d bytes: %w (max %d)", subject, len(blob), engine.ErrTooLarge, l.maxEntry)
	}
	_, err = l.publish(ctx, subject, blob, 0, nil)
	if errors.Is(err, engine.ErrConflict) {
		return nil // it exists: values are named by their content, the first one stays
	}
	return err
}

func (l *Log) Value(ctx context.Context, ns, id string) ([]byte, error) {
	subject, err := valueSubject(ns, id)
	if err != nil {
		return nil, err
	}
	m, err := l.get(ctx, getRequest{LastFor: subject}, l.leader)
	if err != nil {
		return nil, fmt.Errorf("logstore: value %s: %w", subject, err)
	}
	return m.data, nil
}

// Values lists the namespace's value subjects (STREAM.INFO: O(values of the namespace)).
func (l *Log) Values(ctx context.Context, ns string, fn func(id string) bool) error {
	if err := wire.ValidateID(ns); err != nil {
		return fmt.Errorf("logstore: values of %q: %w", ns, err)
	}
	prefix := "cp.val." + wire.EncodeID(ns) + "."
	subjects, err := l.subjects(ctx, prefix+"*")
	if err != nil {
		return fmt.Errorf("logstore: values of %q: %w", ns, err)
	}
	ids := make([]string, 0, len(subjects))
	for _, s := range subjects {
		id, err := wire.DecodeID(strings.TrimPrefix(s, prefix))
		if err != nil {
			return fmt.Errorf("logstore: values of %q: subject %q: %w", ns, s, err)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if !fn(id) {
			return nil
		}
	}
	return nil
}

func (l *Log) DeleteValue(ctx context.Context, ns, id string) error {
	subject, err := valueSubject(ns, id)
	if err != nil {
		return err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	if err := l.stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		return fmt.Errorf("logstore: deleting value %s: %w", subject, err)
	}
	return nil
}
