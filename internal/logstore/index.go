package logstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// create appends a log's first entry: its index entry first, so that a crash between the two
// leaves a listed session with an empty log (which Sessions' callers skip) rather than a session
// nobody can list. The first entry names its index entry (Cp-Index). A creation that fails takes
// its index entry back (unlist), unless its entry may still land or the log's first entry names
// it; one that shared its index entry makes sure it is still there once its entry landed.
func (l *Log) create(ctx context.Context, key engine.Key, subject string, data []byte) (uint64, error) {
	if l.legacyIndex {
		// A legacy server keeps the index entry of a creation that fails, and the engine tries a
		// creation without reading the head first (a first save it has not cached): look before
		// listing, or every such save of a session that exists lists it once more.
		last, err := l.Last(ctx, key)
		switch {
		case err == nil:
			return 0, fmt.Errorf("logstore: creating %s: %w: its log has entry %d", subject, engine.ErrConflict, last.Seq)
		case !errors.Is(err, engine.ErrNotFound):
			return 0, fmt.Errorf("logstore: creating %s: %w", subject, err)
		}
	}
	c := l.newCreation(key, subject)
	c.list(ctx)
	return c.Append(ctx, data)
}

// Create begins the creation of key's log (engine.Creator): its index entry is published at once,
// on a goroutine of its own, while the caller makes the first entry; Append then waits for its
// sequence (Cp-Index) and publishes the entry, as create does, in the same order. A creation that
// appends nothing (Abandon) takes its index entry back as a refused creation does (unlist: never
// one that another creation's first entry names). On a server older than 2.11 nothing is begun
// early (a creation there reads the head before it lists: create), and a key that is not valid
// gets its error from Append.
func (l *Log) Create(ctx context.Context, key engine.Key) engine.Creation {
	subject, err := LogSubject(key)
	if err != nil || l.legacyIndex {
		return appendOnly{l: l, key: key}
	}
	c := l.newCreation(key, subject)
	go c.list(ctx)
	return c
}

// creation is a log's creation under way: its index entry published, or being published, and its
// first entry not yet.
type creation struct {
	l            *Log
	subject, idx string
	token        []byte
	listed       chan struct{} // closed once the index entry's publish returned: idxSeq, shared, listErr
	idxSeq       uint64
	shared       bool // another creation wrote the index entry (list)
	listErr      error
}

func (l *Log) newCreation(key engine.Key, subject string) *creation {
	idx, _ := indexSubject(key.Namespace) // the key is valid
	return &creation{l: l, subject: subject, idx: idx, token: []byte(indexToken(key)), listed: make(chan struct{})}
}

// list publishes the log's index entry, or finds the one a creation of the same key wrote (list).
func (c *creation) list(ctx context.Context) {
	defer close(c.listed)
	c.idxSeq, c.shared, c.listErr = c.l.list(ctx, c.idx, c.token)
}

// Append publishes the log's first entry, naming its index entry, once that is stored.
func (c *creation) Append(ctx context.Context, data []byte) (uint64, error) {
	l := c.l
	if len(data) > l.maxEntry {
		err := fmt.Errorf("logstore: appending %d bytes to %s: %w (max %d)", len(data), c.subject, engine.ErrTooLarge, l.maxEntry)
		return 0, errors.Join(err, c.Abandon(ctx))
	}
	<-c.listed
	if c.listErr != nil {
		return 0, fmt.Errorf("logstore: listing %s: %w", c.subject, c.listErr)
	}
	hdr := nats.Header{indexHeader: []string{strconv.FormatUint(c.idxSeq, 10)}}
	var seq uint64
	var err error
	if l.beforeFirstEntry != nil {
		err = l.beforeFirstEntry()
	}
	if err == nil {
		seq, err = l.publish(ctx, c.subject, data, lastSeqIs(0), hdr)
	}
	switch {
	case l.legacyIndex: // legacy servers never delete index entries (Log.legacyIndex)
		return seq, err
	case err != nil:
		return l.unlist(ctx, c.subject, c.idx, c.token, c.idxSeq, c.shared, data, err)
	case c.shared:
		// Another creation wrote the index entry, and may have taken it back (unlist) before
		// this one's first entry landed naming it.
		if err := l.relistIfGone(ctx, c.idx, c.token, c.idxSeq); err != nil {
			return 0, fmt.Errorf("logstore: %s created as entry %d, but its index entry %d is gone and listing it again failed: %w", c.subject, seq, c.idxSeq, err)
		}
	}
	return seq, nil
}

// errAbandoned is the outcome unlist is given for a creation that appended nothing: a refusal
// (refused), so its index entry is taken back unless another creation's first entry names it.
var errAbandoned = errors.New("logstore: creation abandoned")

// Abandon takes back the index entry of a creation that appends nothing, as unlist does for a
// refused creation. An index entry whose publish went unanswered may have been stored, and stays
// listed (the error says so); one it shared with a creation still under way, or timed out, is
// left to that creation (unlist), the key listed with an empty log meanwhile (Sessions' callers
// skip it).
func (c *creation) Abandon(ctx context.Context) error {
	<-c.listed
	switch {
	case c.listErr != nil && refused(c.listErr):
		return nil // nothing was stored
	case c.listErr != nil:
		return fmt.Errorf("logstore: abandoning the creation of %s: its index entry may stay: %w", c.subject, c.listErr)
	}
	_, err := c.l.unlist(ctx, c.subject, c.idx, c.token, c.idxSeq, c.shared, nil, errAbandoned)
	if err == errAbandoned { // unlist's answer when nothing went wrong beside the abandon itself
		return nil
	}
	return fmt.Errorf("logstore: abandoning the creation of %s: %w", c.subject, err)
}

// appendOnly is a creation that begins nothing before its Append (Create on a legacy server).
type appendOnly struct {
	l   *Log
	key engine.Key
}

func (c appendOnly) Append(ctx context.Context, data []byte) (uint64, error) {
	return c.l.Append(ctx, c.key, data, 0)
}

func (appendOnly) Abandon(context.Context) error { return nil }

// list writes key's index entry (token) on idx for a creation, and returns its sequence and
// whether another creation wrote it (shared). A creation tried again after one whose first entry
// went unanswered (which keeps its index entry: its entry may still land) must not list the key a
// second time, or a walk of the listing names it on two pages. So the index entry is published
// with a message id of the key's: within the stream's duplicate window (2 minutes), JetStream
// answers a repeat with the sequence of the entry already there, on any daemon, and the creations
// share it (as do creations racing for one key). A repeat that finds its entry deleted since (a
// Purge, or an unlist of a refused creation) lists the key anew, under an id of its own.
func (l *Log) list(ctx context.Context, idx string, token []byte) (uint64, bool, error) {
	id := idx + "/" + string(token)
	seq, repeat, err := l.publishIndexEntry(ctx, idx, token, id)
	if err != nil || !repeat {
		return seq, false, err
	}
	holds, err := l.indexEntryIs(ctx, idx, token, seq)
	if err != nil || holds {
		return seq, true, err
	}
	seq, _, err = l.publishIndexEntry(ctx, idx, token, id+"/"+nuid.Next())
	return seq, false, err
}

// indexEntryIs reports whether stream sequence seq still is the index entry token on idx, as the
// leader says (a deleted entry is not).
func (l *Log) indexEntryIs(ctx context.Context, idx string, token []byte, seq uint64) (bool, error) {
	m, err := l.get(ctx, getRequest{Seq: seq}, leaderOnly)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return m.subject == idx && bytes.Equal(m.data, token), nil
}

// relistIfGone lists the key (token) again if its index entry idxSeq, which its log's first entry
// names, was deleted: a creation that shared the entry and failed took it back (unlist) while
// this one's first entry was under way. The new entry carries a message id made from idxSeq, so
// that the two creations, each of which may find the entry gone, list the key once between them.
// Purge finds it although the first entry names idxSeq (indexEntries).
func (l *Log) relistIfGone(ctx context.Context, idx string, token []byte, idxSeq uint64) error {
	holds, err := l.indexEntryIs(ctx, idx, token, idxSeq)
	if err != nil || holds {
		return err
	}
	_, _, err = l.publishIndexEntry(ctx, idx, token, idx+"/"+string(token)+"/relist/"+strconv.FormatUint(idxSeq, 10))
	return err
}

// publishIndexEntry publishes token on idx with message id id, and says whether JetStream took it
// for a repeat of a message it holds under that id (whose sequence it then returns). A clustered
// stream still storing another publish of the id says so (10158): asked again shortly, it
// answers the repeat.
func (l *Log) publishIndexEntry(ctx context.Context, idx string, token []byte, id string) (uint64, bool, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	for attempt := 1; ; attempt++ {
		seq, repeat, err := l.publishIndexEntryOnce(ctx, idx, token, id)
		var ae *apiError
		if !errors.As(err, &ae) || ae.ErrCode != errCodeDuplicateInProcess {
			return seq, repeat, err
		}
		select {
		case <-ctx.Done():
			return 0, false, fmt.Errorf("%w: %w", err, ctx.Err())
		case <-time.After(time.Duration(min(attempt, 10)) * time.Millisecond):
		}
	}
}

func (l *Log) publishIndexEntryOnce(ctx context.Context, idx string, token []byte, id string) (uint64, bool, error) {
	m := &nats.Msg{Subject: idx, Data: token, Header: nats.Header{jetstream.MsgIDHeader: []string{id}}}
	resp, err := l.nc.RequestMsgWithContext(ctx, m)
	if err = unavailable(err); err != nil {
		return 0, false, fmt.Errorf("logstore: publishing to %s: %w", idx, err)
	}
	var ack struct {
		Seq       uint64 `json:"seq"`
		Duplicate bool   `json:"duplicate"`
	}
	if err := apiReply(resp, &ack); err != nil {
		return 0, false, fmt.Errorf("logstore: publishing to %s: %w", idx, err)
	}
	if ack.Seq == 0 {
		return 0, false, fmt.Errorf("logstore: publishing to %s: ack without a sequence %.200q", idx, resp.Data)
	}
	return ack.Seq, ack.Duplicate, nil
}

// unlist decides what becomes of the index entry idxSeq of a creation whose first entry (data)
// failed with err. Creations of one key may share the entry (list), so it is never deleted while
// the log's first entry names it: the leader is asked for that entry first.
//   - It names idxSeq: the key is listed as it must be. If the server did not refuse this
//     creation's entry (a timeout), it may be this one's, landed after all: with the same bytes,
//     the creation succeeded and its sequence is returned; other bytes are another creation's,
//     which won (engine.ErrConflict). A refusal is returned as it is.
//   - It names another: another creation won with an entry of its own; idxSeq lists nothing and
//     is deleted (no creation naming it can land on a log that has an entry).
//   - It names none (the log's first entry was packed or deleted since, as a session's deletion
//     does): an entry this creation wrote lists nothing and is deleted; a shared one may be the
//     log's own listing, and stays.
//   - The log is empty: after a timeout the entry stays (this creation's entry may still land,
//     and must not land unlisted; a creation tried again within the duplicate window shares it,
//     one tried later lists the key a second time, which engine.Log allows: Sessions skips the
//     second in one page). After a refusal it is deleted, so that a refused creation lists
//     nothing; a creation sharing it whose entry lands meanwhile lists the key again
//     (relistIfGone), here if it landed before the delete, or itself if after. A refused
//     creation that shared the entry leaves it to the creation that wrote it, which may still
//     land (and then does not look again).
func (l *Log) unlist(ctx context.Context, subject, idx string, token []byte, idxSeq uint64, shared bool, data []byte, err error) (uint64, error) {
	named := strconv.FormatUint(idxSeq, 10)
	first, ferr := l.get(ctx, getRequest{Seq: 1, NextFor: subject}, leaderOnly)
	switch {
	case ferr == nil && shared && first.header.Get(indexHeader) == "":
		return 0, err // maybe the log's own index entry: it stays
	case errors.Is(ferr, engine.ErrNotFound) && !refused(err):
		return 0, fmt.Errorf("%w (its index entry %d stays: the entry may still land)", err, idxSeq)
	case errors.Is(ferr, engine.ErrNotFound) && shared:
		// The creation that wrote the entry may still be under way, and its first entry land
		// after this one's delete, naming it: that writer does not look whether its entry is still
		// there (only sharers do, relistIfGone), so its session would be stored but never listed.
		// The writer takes the entry back itself if it fails; if it timed out, the entry stays,
		// as it would have without this creation.
		return 0, err
	case errors.Is(ferr, engine.ErrNotFound):
		// refused, and this creation wrote the entry: deleted below
	case ferr != nil:
		return 0, errors.Join(err, fmt.Errorf("logstore: its index entry %d stays: reading the log's first entry: %w", idxSeq, ferr))
	case first.header.Get(indexHeader) == named && !refused(err) && bytes.Equal(first.data, data):
		return first.seq, nil
	case first.header.Get(indexHeader) == named && !refused(err):
		return 0, fmt.Errorf("%w: %w (another creation's first entry %d, sharing its index entry %d, landed first)", engine.ErrConflict, err, first.seq, idxSeq)
	case first.header.Get(indexHeader) == named:
		return 0, err // the winner shares the index entry: it stays
	}
	if ferr != nil && l.beforeUnlistDelete != nil {
		l.beforeUnlistDelete()
	}
	if derr := l.deleteSeqs(ctx, []uint64{idxSeq}); derr != nil {
		return 0, errors.Join(err, fmt.Errorf("logstore: its index entry %d on %s stays: %w", idxSeq, idx, derr))
	}
	if ferr == nil {
		return 0, err // the log has another creation's entry: nothing can land naming idxSeq
	}
	// The log was empty: a creation that shared idxSeq may have landed since.
	first, ferr = l.get(ctx, getRequest{Seq: 1, NextFor: subject}, leaderOnly)
	switch {
	case errors.Is(ferr, engine.ErrNotFound):
	case ferr != nil:
		return 0, errors.Join(err, fmt.Errorf("logstore: its index entry %d was deleted, and reading the log's first entry again failed: %w", idxSeq, ferr))
	case first.header.Get(indexHeader) == named:
		if rerr := l.relistIfGone(ctx, idx, token, idxSeq); rerr != nil {
			return 0, errors.Join(err, fmt.Errorf("logstore: listing %s again (another creation's entry %d landed naming index entry %d, deleted): %w", subject, first.seq, idxSeq, rerr))
		}
	}
	return 0, err
}

// indexEntries returns the sequences of key's entries on its namespace's index, for Purge.
//
// The log's first entry names its index entry (Cp-Index). Once that entry was deleted (a pack),
// the index is read up to the log's first entry, which every index entry of the log precedes:
// O(sessions created before it). An empty log has no first entry: the whole index is read, for
// what crashed creations left; but a creation under way (its index entry written, its first
// entry not yet) must keep its index entry, or its entry lands unlisted. So an empty log's index
// entries younger than l.indexGrace, in stream time, are kept (creationGrace).
func (l *Log) indexEntries(ctx context.Context, key engine.Key, subject string) ([]uint64, error) {
	idx, _ := indexSubject(key.Namespace)
	token := []byte(indexToken(key))
	first, err := l.get(ctx, getRequest{Seq: 1, NextFor: subject}, l.upToDate)
	if err == nil {
		if seq, perr := strconv.ParseUint(first.header.Get(indexHeader), 10, 64); perr == nil && seq > 0 {
			m, err := l.get(ctx, getRequest{Seq: seq}, l.upToDate)
			switch {
			case err == nil && m.subject == idx && bytes.Equal(m.data, token):
				return []uint64{seq}, nil
			case errors.Is(err, engine.ErrNotFound):
				// Deleted by a creation that shared it and failed: the key was listed again
				// after the first entry (relistIfGone).
				return l.indexEntriesAround(ctx, idx, token, first.seq)
			}
		}
		return l.indexEntriesBefore(ctx, idx, token, first.seq, time.Time{})
	}
	if !errors.Is(err, engine.ErrNotFound) {
		return nil, err
	}
	now, err := l.streamTime(ctx)
	if err != nil {
		return nil, err
	}
	return l.indexEntriesBefore(ctx, idx, token, 0, now.Add(-l.indexGrace))
}

// indexEntriesBefore returns the sequences of idx's entries that hold token, up to sequence
// bound (0: to the end), leaving out those stored after writtenBy (zero: none left out; one whose
// time is unknown is left out too).
func (l *Log) indexEntriesBefore(ctx context.Context, idx string, token []byte, bound uint64, writtenBy time.Time) ([]uint64, error) {
	var seqs []uint64
	err := l.scan(ctx, idx, 1, bound, rangeBatch, func(m msg) bool {
		young := !writtenBy.IsZero() && (m.time.IsZero() || m.time.After(writtenBy))
		if bytes.Equal(m.data, token) && !young {
			seqs = append(seqs, m.seq)
		}
		return true
	})
	return seqs, err
}

// indexEntriesAround returns the sequences of idx's entries that hold token: all of those before
// the log's first entry (bound), and those after it that are older than l.indexGrace (a listing
// again of the log, relistIfGone); a younger one may be a creation's under way, after this Purge.
func (l *Log) indexEntriesAround(ctx context.Context, idx string, token []byte, bound uint64) ([]uint64, error) {
	now, err := l.streamTime(ctx)
	if err != nil {
		return nil, err
	}
	before, err := l.indexEntriesBefore(ctx, idx, token, bound, time.Time{})
	if err != nil {
		return nil, err
	}
	all, err := l.indexEntriesBefore(ctx, idx, token, 0, now.Add(-l.indexGrace))
	for _, seq := range all {
		if seq > bound {
			before = append(before, seq)
		}
	}
	return before, err
}

// streamTime is the time of the stream's last message, by the clocks of its leaders: an index
// entry's age is measured against it rather than against this host's clock, which may differ
// from the servers'. It is never later than the servers' now, so ages are never overstated.
func (l *Log) streamTime(ctx context.Context) (time.Time, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	info, err := l.stream.Info(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading stream %s's last time: %w", l.cfg.Stream, err)
	}
	return info.State.LastTime, nil
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
	listed := map[engine.Key]bool{} // a key may have two index entries (unlist, Purge)
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
		if l.legacyIndex {
			listed, err := l.indexEntryHolds(ctx, k, m.seq)
			if err != nil {
				bad = fmt.Errorf("index entry %d: %w", m.seq, err)
				return false
			}
			if !listed {
				return true
			}
		}
		if !listed[k] {
			keys = append(keys, k)
			listed[k] = true
		}
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

// indexEntryHolds reports whether index entry seq lists k (legacy servers, which keep index
// entries of lost creations and purged logs): k's log must have entries, and its first entry, if
// it still names its index entry (Cp-Index), must name this one. A log whose first entry was
// deleted (packed) cannot tell, and is listed: a key re-created after a purge, or created by
// racing creators, may then be listed more than once on such a server.
func (l *Log) indexEntryHolds(ctx context.Context, k engine.Key, seq uint64) (bool, error) {
	subject, _ := LogSubject(k)
	first, err := l.get(ctx, getRequest{Seq: 1, NextFor: subject}, l.upToDate)
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

// Namespaces lists the namespaces of the index subjects (cp.idx.<ns>) and of the value subjects
// (cp.val.<ns>.<id>) that hold a message, with STREAM.INFO: O(namespaces + values). A namespace
// whose sessions were all purged is still listed while it holds values (a sweep must visit them);
// on a server older than 2.11, whose index entries are never deleted (Log.legacyIndex), it stays
// listed for good.
func (l *Log) Namespaces(ctx context.Context) ([]string, error) {
	found := map[string]bool{}
	for _, filter := range []string{"cp.idx.*", "cp.val.*.*"} {
		subjects, err := l.subjects(ctx, filter)
		if err != nil {
			return nil, fmt.Errorf("logstore: namespaces: %w", err)
		}
		for _, s := range subjects {
			token := strings.Split(s, ".")[2] // cp.idx.<ns>, cp.val.<ns>.<id>
			ns, err := wire.DecodeID(token)
			if err != nil {
				return nil, fmt.Errorf("logstore: namespaces: subject %q: %w", s, err)
			}
			found[ns] = true
		}
	}
	return slices.Sorted(maps.Keys(found)), nil
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
