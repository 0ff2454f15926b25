package service

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/internal/transfer/edge"
)

// Read-your-writes without a round trip of its own.
//
// A read of a session must see every save queued for it on CP_INGEST before the read began
// (awaitIngest). Asked one after the other, "is a save still queued?" and the engine's read cost
// two round trips. They can go together when the server is sure to answer the queue's question
// before it reads the session: then a queue found empty means every save queued before the read
// was committed before the engine's read was served (a save leaves the queue only once its version
// is stored), and a queue found holding saves means waiting for them and reading again, as before.
//
// nats-server handles the messages of one client connection in the order they arrive, and
// answers a direct get from a client on a server that holds the stream in place, before it reads
// the client's next message (stream.go, processDirectGetLastBySubjectRequest: only gets that come
// over a route, gateway or leaf node are queued). So the queue's direct get is written to the
// connection first (nothing waits for its answer), then the engine reads on the same connection.
// That holds when the daemon reads CP_INGEST by direct get (not from the leader: a single replica)
// on the server it is connected to; otherwise the two go one after the other.

// peekQueue asks CP_INGEST, without waiting, for the last save queued on subject. ok is false when
// the answer could not be ordered before a read that follows on the connection (above): the
// caller then waits for the queue first.
func (s *Service) peekQueue(subject string) (p *queuePeek, ok bool) {
	if s.st.Read.Leader || !s.ingestHere() {
		return nil, false
	}
	p, err := s.peeks.send("$JS.API.DIRECT.GET."+s.st.Ingest.CachedInfo().Config.Name+"."+subject, nil)
	if err != nil {
		return nil, false
	}
	return p, true
}

// ingestHere reports whether CP_INGEST is served by the server the daemon is connected to (the
// single server of a deployment without a cluster).
func (s *Service) ingestHere() bool {
	if s.nc.ConnectedClusterName() != "" {
		return false
	}
	info := s.st.Ingest.CachedInfo()
	return info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == s.nc.ConnectedServerName()
}

// afterQueued runs read once every save queued on subject before the call is settled: with the
// queue's question and read sent together when they can be (above), else one after the other.
// A queue the daemon's notes know to be empty (edge/notes.go) is not asked at all; one found
// empty teaches the notes so.
func (s *Service) afterQueued(ctx context.Context, subject string, read func() error) error {
	if s.notes.Quiet(subject) {
		return read()
	}
	mark := s.notes.Begin()
	p, ok := s.peekQueue(subject)
	if !ok {
		if err := s.awaitIngest(ctx, subject); err != nil {
			return err
		}
		return read()
	}
	rerr := read()
	upTo, err := p.lastSeq(ctx)
	if err != nil {
		return fmt.Errorf("%w: checking the ingest queue: %v", edge.ErrUnavailable, err)
	}
	if upTo == 0 {
		s.notes.Emptied(subject, mark)
		return rerr // nothing queued when the queue was asked, before read was served
	}
	// Saves were queued: the read may have come before them. Wait, and read again.
	if err := s.awaitQueued(ctx, subject, upTo); err != nil {
		return err
	}
	return read()
}

// peeks sends requests whose answers are awaited later, on one subscription of the daemon's
// connection (a request of nats.go sends and waits in one call).
type peeks struct {
	nc *nats.Conn

	mu      sync.Mutex
	sub     *nats.Subscription
	prefix  string // the subscription's subject without its last token
	next    uint64
	waiting map[string]chan *nats.Msg
}

// queuePeek is a request sent; lastSeq waits for its answer.
type queuePeek struct {
	p     *peeks
	token string
	reply chan *nats.Msg
}

// send publishes a request on subject, its reply going to the peeks' subscription.
func (ps *peeks) send(subject string, data []byte) (*queuePeek, error) {
	ps.mu.Lock()
	if ps.sub == nil {
		prefix := ps.nc.NewRespInbox()
		sub, err := ps.nc.Subscribe(prefix+".*", ps.deliver)
		if err != nil {
			ps.mu.Unlock()
			return nil, err
		}
		ps.sub, ps.prefix, ps.waiting = sub, prefix, map[string]chan *nats.Msg{}
	}
	ps.next++
	token := strconv.FormatUint(ps.next, 36)
	reply := make(chan *nats.Msg, 1)
	ps.waiting[token] = reply
	inbox := ps.prefix + "." + token
	ps.mu.Unlock()
	if err := ps.nc.PublishRequest(subject, inbox, data); err != nil {
		ps.forget(token)
		return nil, err
	}
	return &queuePeek{p: ps, token: token, reply: reply}, nil
}

// deliver hands an answer to its request; one nobody waits for any more is dropped.
func (ps *peeks) deliver(m *nats.Msg) {
	token := m.Subject[len(ps.prefix)+1:]
	ps.mu.Lock()
	reply, ok := ps.waiting[token]
	delete(ps.waiting, token)
	ps.mu.Unlock()
	if ok {
		reply <- m // buffered, one answer per request
	}
}

func (ps *peeks) forget(token string) {
	ps.mu.Lock()
	delete(ps.waiting, token)
	ps.mu.Unlock()
}

// stop drops the subscription.
func (ps *peeks) stop() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.sub != nil {
		_ = ps.sub.Unsubscribe()
		ps.sub = nil
	}
}

// lastSeq waits for the answer of a direct get of the last message on a subject: its stream
// sequence, 0 when there is none.
func (q *queuePeek) lastSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := edge.OpContext(ctx)
	defer cancel()
	select {
	case m := <-q.reply:
		return directGetSeq(m)
	case <-ctx.Done():
		q.p.forget(q.token)
		return 0, ctx.Err()
	}
}

// directGetSeq reads the answer of a direct get: 404 is no message; anything else but a message
// (with its Nats-Sequence header) is an error.
func directGetSeq(m *nats.Msg) (uint64, error) {
	switch status := m.Header.Get("Status"); status {
	case "":
	case "404":
		return 0, nil
	default:
		return 0, fmt.Errorf("direct get: status %s %s", status, m.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("direct get: reply without a sequence (%q)", m.Header.Get("Nats-Sequence"))
	}
	return seq, nil
}
