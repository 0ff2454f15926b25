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

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// create appends a log's first entry: its index entry first, so that a crash between the two
// leaves a listed session with an empty log (which Sessions' callers skip) rather than a session
// nobody can list. The first entry names its index entry (Cp-Index). A creation that fails takes
// its index entry back (unlist), unless its entry may still land.
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
// appends nothing (Abandon) deletes its index entry, as a creation whose entry failed does. On a
// server older than 2.11 nothing is begun early (a creation there reads the head before it
// lists: create), and a key that is not valid gets its error from Append.
func (l *Log) Create(ctx context.Context, key engine.Key) engine.Creation {
	subject, err := logSubject(key)
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
	key          engine.Key
	subject, idx string
	listed       chan struct{} // closed once the index entry's publish returned: idxSeq, listErr
	idxSeq       uint64
	listErr      error
}

func (l *Log) newCreation(key engine.Key, subject string) *creation {
	idx, _ := indexSubject(key.Namespace) // the key is valid
	return &creation{l: l, key: key, subject: subject, idx: idx, listed: make(chan struct{})}
}

// list publishes the log's index entry (no compare-and-swap: every creation of the namespace
// appends to its index).
func (c *creation) list(ctx context.Context) {
	defer close(c.listed)
	c.idxSeq, c.listErr = c.l.publish(ctx, c.idx, []byte(indexToken(c.key)), anyLastSeq, nil)
}

// Append publishes the log's first entry, naming its index entry, once that is stored.
func (c *creation) Append(ctx context.Context, data []byte) (uint64, error) {
	if len(data) > c.l.maxEntry {
		err := fmt.Errorf("logstore: appending %d bytes to %s: %w (max %d)", len(data), c.subject, engine.ErrTooLarge, c.l.maxEntry)
		return 0, errors.Join(err, c.Abandon(ctx))
	}
	<-c.listed
	if c.listErr != nil {
		return 0, fmt.Errorf("logstore: listing %s: %w", c.subject, c.listErr)
	}
	hdr := nats.Header{indexHeader: []string{strconv.FormatUint(c.idxSeq, 10)}}
	seq, err := c.l.publish(ctx, c.subject, data, lastSeqIs(0), hdr)
	if err == nil || c.l.legacyIndex { // legacy servers never delete index entries (Log.legacyIndex)
		return seq, err
	}
	return c.l.unlist(ctx, c.subject, c.idx, c.idxSeq, err)
}

// Abandon deletes the index entry of a creation that appends nothing. An index entry whose publish
// went unanswered may have been stored, and stays listed (the error says so).
func (c *creation) Abandon(ctx context.Context) error {
	<-c.listed
	switch {
	case c.listErr != nil && refused(c.listErr):
		return nil // nothing was stored
	case c.listErr != nil:
		return fmt.Errorf("logstore: abandoning the creation of %s: its index entry may stay: %w", c.subject, c.listErr)
	}
	if err := c.l.deleteSeqs(ctx, []uint64{c.idxSeq}); err != nil {
		return fmt.Errorf("logstore: abandoning the creation of %s: its index entry %d on %s stays: %w", c.subject, c.idxSeq, c.idx, err)
	}
	return nil
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

// unlist deletes the index entry idxSeq of a creation whose first entry failed with err, so that
// a creation tried again is not listed twice. If the server refused the entry (a lost
// compare-and-swap: the winner wrote its own index entry; a full stream; ...), nothing was
// stored. Otherwise (a timeout) the entry may have been stored, or may still be: the leader is
// asked for the log's first entry. If it names idxSeq, the creation succeeded after all and its
// sequence is returned; if it names another, another creation won; if the log is empty, the index
// entry stays (an entry still under way would otherwise land unlisted): a retried creation is
// then listed twice, which engine.Log allows (Sessions skips the second in one page).
func (l *Log) unlist(ctx context.Context, subject, idx string, idxSeq uint64, err error) (uint64, error) {
	if !refused(err) {
		first, ferr := l.get(ctx, getRequest{Seq: 1, NextFor: subject}, leaderOnly)
		switch {
		case errors.Is(ferr, engine.ErrNotFound):
			return 0, fmt.Errorf("%w (its index entry %d stays: the entry may still land)", err, idxSeq)
		case ferr != nil:
			return 0, errors.Join(err, fmt.Errorf("logstore: its index entry %d stays: reading the log's first entry: %w", idxSeq, ferr))
		case first.header.Get(indexHeader) == strconv.FormatUint(idxSeq, 10):
			return first.seq, nil
		}
	}
	if derr := l.deleteSeqs(ctx, []uint64{idxSeq}); derr != nil {
		return 0, errors.Join(err, fmt.Errorf("logstore: its index entry %d on %s stays: %w", idxSeq, idx, derr))
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
			if err == nil && m.subject == idx && bytes.Equal(m.data, token) {
				return []uint64{seq}, nil
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
	subject, _ := logSubject(k)
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
