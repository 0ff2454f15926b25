package edge

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Notes of what was stored, so that a head restore served from the read cache asks the server
// nothing (docs/format.md §8.15o).
//
// A read of a session must see every save acknowledged before it: one queued on CP_INGEST (the
// ingest queue's question, service/queuepeek.go) and one appended to CP_LOG by another daemon
// (Log.Moved, engine.ReadZstdIf). Both streams republish the headers of every message they store
// (RePublish, HeadersOnly: NoteLogPrefix, NoteIngestPrefix): a few hundred bytes naming the
// subject and the sequence. The server sends that copy from the same queue as the publish's
// acknowledgement, before it (nats-server 2.15 stream.go, processJetStreamMsg: both go to the
// stream's outq, which its internalLoop delivers in order), so a daemon connected to the server
// that holds the stream has the note in its connection's buffer before the writer has its ack,
// and so before any request sent after that ack. nats.go hands the note to a channel
// subscription on its read loop, before the request's handler runs: a read that takes every note
// out of the channel first knows of every write acknowledged before it.
//
// What the notes cannot promise (a note dropped, a reconnect, the server not holding the stream,
// a stream without the republish) makes the daemon ask, as it did without them. Notes can only
// make the daemon ask more: a note (even one someone published by hand) marks a log as moved and
// a queue as busy; only the server's own answer to a question marks them settled.
type Notes struct {
	nc          *nats.Conn
	subs        []*nats.Subscription // the notes, and the streams' advisories, into ch
	ch          chan *nats.Msg
	log, ingest jetstream.Stream

	mu         sync.Mutex
	epoch      uint64            // bumped at every reset: what was learnt in an earlier epoch is not set
	reconnects uint64            // the connection's count when the epoch began
	dropped    int               // the subscription's drops when the epoch began
	armed      bool              // a note came in this epoch: the server holds the subscription
	trusted    bool              // the streams were last seen republishing, and no advisory of a change came since
	advisories uint64            // advisories of the streams seen: a check begun before the last one does not count
	checked    time.Time         // when the streams' settings were last looked at
	ingestGen  uint64            // ingest notes seen: a queue found empty is trusted only if none came since the question
	heads      map[string]uint64 // log subject → the highest sequence noted or found to be its last
	quiet      map[string]struct{}
	stop       chan struct{}
}

// NoteLogPrefix and NoteIngestPrefix are where CP_LOG and CP_INGEST republish the headers of what
// they store: "$log" and "$ingest" cannot be an encoded namespace ('$' is encoded), so no
// client grant "cp.*.<namespace>.>" covers them.
const (
	NoteLogPrefix    = logstore.NotePrefix
	NoteIngestPrefix = "cp.note.$ingest."
)

// LogRePublish and IngestRePublish are the streams' republish settings.
var (
	LogRePublish    = logstore.NoteRePublish
	IngestRePublish = jetstream.RePublish{Source: wire.IngestSubjectPrefix + ">", Destination: NoteIngestPrefix + ">", HeadersOnly: true}
)

// noteBuffer is how many notes wait in the channel: drained by every read and every pollNotes,
// more than that many writes in between is a drop, which only makes reads ask.
const (
	noteBuffer = 1 << 16
	maxNoted   = 1 << 16 // heads and quiet queues remembered; when full, forgotten (asked again)
	pollNotes  = 50 * time.Millisecond
)

// NewNotes subscribes to the streams' notes when they can be trusted: a single server holding
// both streams, each republishing as LogRePublish and IngestRePublish say. Otherwise it returns
// nil, and a nil *Notes knows nothing (every read asks).
func NewNotes(nc *nats.Conn, log, ingest jetstream.Stream) *Notes {
	return newNotes(nc, log, ingest, noteBuffer, pollNotes)
}

// newNotes is NewNotes with buffer notes waiting at most, taken out every poll.
func newNotes(nc *nats.Conn, log, ingest jetstream.Stream, buffer int, poll time.Duration) *Notes {
	if !republishes(log, LogRePublish) || !republishes(ingest, IngestRePublish) || !streamHere(nc, log) || !streamHere(nc, ingest) {
		return nil
	}
	n := &Notes{nc: nc, ch: make(chan *nats.Msg, buffer), stop: make(chan struct{}), log: log, ingest: ingest}
	subjects := []string{"cp.note.>"}
	for _, s := range []jetstream.Stream{log, ingest} {
		for _, advisory := range streamAdvisories {
			subjects = append(subjects, advisory+s.CachedInfo().Config.Name)
		}
	}
	for _, subject := range subjects {
		sub, err := nc.ChanSubscribe(subject, n.ch)
		if err != nil {
			n.unsubscribe()
			return nil
		}
		n.subs = append(n.subs, sub)
	}
	n.reset()
	// The streams' settings are checked again once the server holds the subscriptions: a change
	// after that comes as an advisory.
	if err := nc.Flush(); err == nil {
		n.check(0)
	}
	go n.poll(poll)
	return n
}

// streamAdvisories are the prefixes of the advisories JetStream sends when a stream's settings
// change or it is deleted, each followed by the stream's name. An update's is sent from the
// stream's outq, as notes and acks are (nats-server 2.15 stream.go, sendUpdateAdvisoryLocked): it
// reaches the daemon before the ack of anything stored after the update. A daemon of a release
// before the notes updates CP_LOG to its settings when it starts, without the republish: from that
// advisory on, nothing is trusted until the settings are seen republishing again. (A stream made
// again after a deletion was deleted first; the creation's advisory comes late, after the daemon
// has made and checked its streams, and is not followed.)
var streamAdvisories = []string{"$JS.EVENT.ADVISORY.STREAM.UPDATED.", "$JS.EVENT.ADVISORY.STREAM.DELETED."}

// recheck is how often the streams' settings are looked at again while they are not trusted.
const recheck = 5 * time.Second

func republishes(s jetstream.Stream, want jetstream.RePublish) bool {
	rp := s.CachedInfo().Config.RePublish
	return rp != nil && *rp == want
}

// check asks for both streams' settings and trusts the notes again if both republish, and no
// advisory came after the one numbered advisories (what the caller saw when it began).
func (n *Notes) check(advisories uint64) {
	ctx, cancel := OpContext(context.Background())
	defer cancel()
	ok := true
	for _, st := range []struct {
		s    jetstream.Stream
		want jetstream.RePublish
	}{{n.log, LogRePublish}, {n.ingest, IngestRePublish}} {
		_, err := st.s.Info(ctx)
		ok = ok && err == nil && republishes(st.s, st.want) && streamHere(n.nc, st.s)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.checked = time.Now()
	if ok && n.advisories == advisories {
		n.trusted = true
	}
}

// streamHere reports whether s is stored on the server nc is connected to (a single server): only
// then does a note reach the daemon before the acknowledgement of what it notes.
func streamHere(nc *nats.Conn, s jetstream.Stream) bool {
	if nc.ConnectedClusterName() != "" {
		return false
	}
	info := s.CachedInfo()
	return info.Config.Replicas <= 1 && (info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == nc.ConnectedServerName())
}

// Stop drops the subscription.
func (n *Notes) Stop() {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.stop:
		return
	default:
	}
	close(n.stop)
	n.unsubscribe()
}

func (n *Notes) unsubscribe() {
	for _, sub := range n.subs {
		_ = sub.Unsubscribe()
	}
}

// poll takes the notes out of the channel now and then, so that it does not fill while no read
// comes.
func (n *Notes) poll(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.mu.Lock()
			n.catchUpLocked()
			again, advisories := !n.trusted && time.Since(n.checked) > recheck, n.advisories
			n.mu.Unlock()
			if again {
				n.check(advisories)
			}
		}
	}
}

// catchUpLocked takes every note out of the channel, then starts a new epoch if one may have been
// missed: the subscription dropped one (channel full) or the connection was lost meanwhile
// (nats.go counts the reconnect before its new read loop starts, and its old one has ended).
func (n *Notes) catchUpLocked() {
	for {
		select {
		case m := <-n.ch:
			n.applyLocked(m)
			continue
		default:
		}
		break
	}
	dropped, err := n.droppedSoFar()
	if err != nil || dropped != n.dropped || n.nc.Stats().Reconnects != n.reconnects || n.nc.ConnectedClusterName() != "" {
		n.resetLocked()
	}
}

func (n *Notes) reset() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.resetLocked()
}

// resetLocked forgets everything learnt, after a gap. The notes still in the channel may have
// been sent before what was missed: they go too (a note dropped only means asking).
func (n *Notes) resetLocked() {
	for {
		select {
		case <-n.ch:
			continue
		default:
		}
		break
	}
	n.forgetLocked()
	n.reconnects = n.nc.Stats().Reconnects
	n.dropped, _ = n.droppedSoFar()
}

// forgetLocked forgets everything learnt and begins a new epoch. A gap (a drop, a reconnect) is
// still found by the next catchUpLocked.
func (n *Notes) forgetLocked() {
	n.epoch++
	n.armed = false
	n.heads, n.quiet = map[string]uint64{}, map[string]struct{}{}
}

// droppedSoFar is how many messages the subscriptions dropped (their channel full).
func (n *Notes) droppedSoFar() (int, error) {
	all := 0
	for _, sub := range n.subs {
		d, err := sub.Dropped()
		if err != nil {
			return 0, err
		}
		all += d
	}
	return all, nil
}

// applyLocked learns from one note: its stream's subject and sequence. The subject is the note's
// own, which the server maps from the stored message's (cp.ingest.X → cp.note.$ingest.X), not its
// Nats-Subject header: a note carries the headers of the message it notes, and the server adds its
// own after them, so a save whose writer set Nats-Subject itself was noted under the writer's word
// (Header.Get takes the first), and the session's queue stayed "known empty" with the save in it:
// a read did not wait for it. The sequence is the last Nats-Sequence, the server's, likewise.
func (n *Notes) applyLocked(m *nats.Msg) {
	if strings.HasPrefix(m.Subject, "$JS.EVENT.ADVISORY.") {
		// The stream changed (its settings, or it was deleted or made again): the notes may have
		// stopped. Nothing is trusted until its settings are seen republishing again (poll).
		n.forgetLocked()
		n.advisories++
		n.trusted, n.checked = false, time.Time{}
		return
	}
	n.armed = true
	switch {
	case strings.HasPrefix(m.Subject, NoteIngestPrefix):
		n.ingestGen++
		delete(n.quiet, wire.IngestSubjectPrefix+strings.TrimPrefix(m.Subject, NoteIngestPrefix))
	case strings.HasPrefix(m.Subject, NoteLogPrefix):
		seq, err := strconv.ParseUint(lastValue(m.Header, jetstream.SequenceHeader), 10, 64)
		if err != nil {
			seq = ^uint64(0) // moved, somehow: never trusted again in this epoch
		}
		n.raiseLocked(logstore.LogSubjectPrefix+strings.TrimPrefix(m.Subject, NoteLogPrefix), seq)
	}
}

// lastValue is the last value of header name in h: the one the server added.
func lastValue(h nats.Header, name string) string {
	if vs := h.Values(name); len(vs) > 0 {
		return vs[len(vs)-1]
	}
	return ""
}

func (n *Notes) raiseLocked(subject string, seq uint64) {
	if len(n.heads) >= maxNoted {
		n.heads = map[string]uint64{}
	}
	if seq > n.heads[subject] {
		n.heads[subject] = seq
	}
}

// A Mark is what a question began with: an answer is learnt only in the epoch it was asked in,
// and only once the subscription is known to be held by the server.
type Mark struct {
	epoch, ingestGen uint64
	armed            bool
}

// Begin is taken before a question is sent.
func (n *Notes) Begin() Mark {
	if n == nil {
		return Mark{}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.catchUpLocked()
	return Mark{epoch: n.epoch, ingestGen: n.ingestGen, armed: n.armed && n.trusted}
}

func logSubjectOf(k engine.Key) (string, bool) {
	subject, err := logstore.LogSubject(k)
	return subject, err == nil
}

// Still reports whether key's log is known to have no entry after seq: the last note of its log
// was seq's own (or a question found nothing after seq), and nothing since can have been missed.
// false means "ask".
func (n *Notes) Still(key engine.Key, seq uint64) bool {
	if n == nil {
		return false
	}
	subject, ok := logSubjectOf(key)
	if !ok {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.catchUpLocked()
	return n.trusted && n.heads[subject] == seq && seq != 0
}

// Stayed learns that a question begun at m found no entry of key's log after seq: any entry
// appended after the server answered is noted, so the log is known still at seq until then.
func (n *Notes) Stayed(key engine.Key, seq uint64, m Mark) {
	if n == nil || !m.armed {
		return
	}
	subject, ok := logSubjectOf(key)
	if !ok {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if m.epoch == n.epoch {
		n.raiseLocked(subject, seq) // a note of a later entry, before or after, keeps it higher
	}
}

// Quiet reports whether the ingest queue is known to hold no save on subject (a session's
// wire.IngestSubject): a question found none, and no note of one came since. false means "ask".
func (n *Notes) Quiet(subject string) bool {
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.catchUpLocked()
	_, ok := n.quiet[subject]
	return ok && n.trusted
}

// Emptied learns that a question begun at m found no save queued on subject. Only if no ingest
// note came since m: that note may be of a save on subject queued after the server answered.
func (n *Notes) Emptied(subject string, m Mark) {
	if n == nil || !m.armed {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.catchUpLocked()
	if m.epoch != n.epoch || m.ingestGen != n.ingestGen {
		return
	}
	if len(n.quiet) >= maxNoted {
		n.quiet = map[string]struct{}{}
	}
	n.quiet[subject] = struct{}{}
}
