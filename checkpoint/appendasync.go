package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/internal/bufpool"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/pieces"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Appends without waiting: group commit (docs/protocol.md §4.0.1).
//
// AppendAsync queues an append behind the session's earlier ones and returns at once. Per session
// the client keeps one request in flight; the appends queued meanwhile go together as the next
// request, a group of up to 64 saves (wire.MaxGroupSaves) within one message, which the daemon
// stores as consecutive versions (in one entry of its log). Each save of a group names the version
// it appends to: the session's head for the first, the version of the save before it for the
// others; the client learns the head once (a get) and follows it from the results.
//
// A save that fails ends the session's run: the appends after it (sent or still queued) fail with
// ErrConflict, as does every later AppendAsync of the session, until the caller restarts it with
// ExpectVersion(head) (the head it learned: Error.Head, or a restore). Without that rule a later
// append would be stored after a gap, without the messages of the one that failed. The client
// follows the head its own appends make: a session saved meanwhile by other means (another
// writer, or Save on this client) makes the next group a conflict, which ends the run too.

// AppendFuture is the outcome of one AppendAsync, known once the save is durable or refused.
type AppendFuture struct {
	done chan struct{}
	v    Version
	err  error
}

// Done is closed once the outcome is known.
func (f *AppendFuture) Done() <-chan struct{} { return f.done }

// Wait returns the save's version once it is durable, or its error; or ctx's error, if ctx ends
// first (the save goes on: wait again, or see it with Restore).
func (f *AppendFuture) Wait(ctx context.Context) (Version, error) {
	select {
	case <-f.done:
		return f.v, f.err
	case <-ctx.Done():
		return Version{}, ctx.Err()
	}
}

func (f *AppendFuture) resolve(v Version, err error) {
	f.v, f.err = v, err
	close(f.done)
}

// asyncAppend is one queued append.
type asyncAppend struct {
	ctx      context.Context
	saveID   string
	reason   string
	epoch    uint64
	messages []byte
	f        *AppendFuture
}

// appendQueue is one session's appends not yet answered.
type appendQueue struct {
	queued  []*asyncAppend // not sent yet
	sending bool           // a goroutine is sending the queue's groups
	head    uint64         // the version the next append extends, when known
	known   bool
	failed  error // the failure that ended the session's run (see above)

	queuedBytes   int           // the messages of queued (appendroom.go)
	room          chan struct{} // closed when appends leave queued, if an AppendAsync waits for room
	failedWaiting bool          // failed is an AppendAsync's ctx that ended waiting for room: a group may be in flight
}

// appendQueues are a client's queues, by session.
type appendQueues struct {
	mu sync.Mutex
	q  map[Key]*appendQueue
}

// AppendAsync stores messages (a JSON array of the messages appended) as the session's next
// version, after every earlier AppendAsync of the same session, without waiting: the future
// resolves once the save is durable. Options: WithSaveID (each append has one; by default a fresh
// one), WithReason, WithEpoch, and ExpectVersion(n), which restarts the session's run from version
// n: allowed only when none of the session's appends is pending. ctx bounds the sending of the
// group it travels in (the oldest of its saves' ctx). When the session already has
// maxQueuedAppends appends (or maxQueuedBytes) waiting to be sent, AppendAsync first waits for
// room, as long as ctx allows (appendroom.go): a producer faster than the daemon is slowed to its
// pace instead of holding all it produced.
func (c *Client) AppendAsync(ctx context.Context, key Key, messages []byte, opts ...SaveOption) *AppendFuture {
	f := &AppendFuture{done: make(chan struct{})}
	key, err := checkKey(key)
	if err != nil {
		f.resolve(Version{}, err)
		return f
	}
	o := parseSaveOptions(opts)
	if err := checkAsyncOptions(o); err != nil {
		f.resolve(Version{}, err)
		return f
	}
	a := &asyncAppend{ctx: ctx, saveID: o.saveID, reason: o.reason, epoch: o.epoch, messages: messages, f: f}
	qs := &c.appends
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.q == nil {
		qs.q = map[Key]*appendQueue{}
	}
	q := qs.q[key]
	if q == nil {
		q = &appendQueue{}
		qs.q[key] = q
	}
	if o.expected != nil {
		// A run that ended has nothing in flight (its sender may still be winding down, and
		// takes this append next).
		if len(q.queued) > 0 || q.sending && (q.failed == nil || q.failedWaiting) {
			f.resolve(Version{}, &Error{Code: wire.CodeBadRequest, Index: -1, Offset: -1,
				Message: "AppendAsync with ExpectVersion restarts a session's appends: wait for its pending ones first"})
			return f
		}
		q.head, q.known, q.failed, q.failedWaiting = *o.expected, true, nil, false
	}
	if err := qs.waitForRoom(ctx, q, len(messages)); err != nil { // appendroom.go
		f.resolve(Version{}, err)
		return f
	}
	if q.failed != nil {
		f.resolve(Version{}, runEnded(q.failed))
		return f
	}
	q.queued = append(q.queued, a)
	q.queuedBytes += len(messages)
	if !q.sending {
		q.sending = true
		go c.sendAppends(key, q)
	}
	return f
}

// checkAsyncOptions refuses what AppendAsync cannot send in a group.
func checkAsyncOptions(o saveOptions) error {
	if err := wire.ValidateID(o.saveID); err != nil {
		return &Error{Code: wire.CodeBadRequest, Message: "save id: " + err.Error(), Index: -1, Offset: -1}
	}
	if o.forkOf != nil || o.imported != nil || (o.dialect != "" && o.dialect != codec.DialectNative) {
		return &Error{Code: wire.CodeBadRequest, Message: "AppendAsync takes native appends only (no fork, import or dialect): use Append", Index: -1, Offset: -1}
	}
	return nil
}

// runEnded is the error of an append refused because an earlier one of its session failed.
func runEnded(cause error) error {
	return &Error{Code: wire.CodeConflict, Index: -1, Offset: -1, Cause: cause,
		Message: fmt.Sprintf("not sent: an earlier append of this session failed (%v); restart with AppendAsync(..., ExpectVersion(head))", cause)}
}

// sendAppends sends the queue's groups, one at a time, until it is empty or the run ends.
func (c *Client) sendAppends(key Key, q *appendQueue) {
	for {
		batch, head, known := c.nextGroup(q)
		if batch == nil {
			return
		}
		if !known {
			var err error
			if head, err = c.headOf(batch[0].ctx, key); err != nil {
				c.endRun(q, batch, 0, err)
				continue
			}
		}
		done, v, err := c.sendGroup(key, head, batch)
		if err != nil {
			c.endRun(q, batch, done, err)
			continue
		}
		c.appends.mu.Lock()
		q.head, q.known = v, true
		c.appends.mu.Unlock()
	}
}

// nextGroup takes the next group off q: up to wire.MaxGroupSaves appends within one message (at
// least one). nil when q is empty (q.sending is cleared then).
func (c *Client) nextGroup(q *appendQueue) ([]*asyncAppend, uint64, bool) {
	c.appends.mu.Lock()
	defer c.appends.mu.Unlock()
	if len(q.queued) == 0 {
		q.sending = false
		return nil, 0, false
	}
	room := c.groupRoom()
	n, size := 0, 0
	for n < len(q.queued) && n < wire.MaxGroupSaves {
		size += len(q.queued[n].messages) + groupItemOverhead
		if n > 0 && size > room {
			break
		}
		n++
	}
	batch := q.queued[:n:n]
	q.queued = q.queued[n:]
	for _, a := range batch {
		q.queuedBytes -= len(a.messages)
	}
	q.roomMade()
	return batch, q.head, q.known
}

// groupItemOverhead is about what an item's framing and fields take beyond its messages.
const groupItemOverhead = 512

// groupRoom is the most a group's body may hold: one message, less room for its headers.
func (c *Client) groupRoom() int {
	return int(pieces.Size(c.nc.MaxPayload(), pieces.ChunkRoom)) - 8<<10
}

// endRun fails the appends of batch from done on with err, and every append still queued with a
// conflict: the session's run ended (see above).
func (c *Client) endRun(q *appendQueue, batch []*asyncAppend, done int, err error) {
	c.appends.mu.Lock()
	rest := q.queued
	q.queued, q.known, q.failed = nil, false, err
	q.queuedBytes, q.failedWaiting = 0, false
	q.roomMade()
	c.appends.mu.Unlock()
	batch[done].f.resolve(Version{}, err)
	for _, a := range batch[done+1:] {
		a.f.resolve(Version{}, runEnded(err))
	}
	for _, a := range rest {
		a.f.resolve(Version{}, runEnded(err))
	}
}

// headOf is the session's head version, 0 when it has none.
func (c *Client) headOf(ctx context.Context, key Key) (uint64, error) {
	v, err := c.Get(ctx, key, 0)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	return v.Version, err
}

// sendGroup stores batch onto version head and resolves the futures of the saves stored. It
// returns how many were, and the version of the last; on an error, the save at that index failed
// with it (the caller fails the rest). A single save, or a group no daemon answers (none runs:
// each then goes to the ingest stream) or takes (an older daemon), is sent alone with Append.
func (c *Client) sendGroup(key Key, head uint64, batch []*asyncAppend) (int, uint64, error) {
	done := 0
	for done < len(batch) {
		rest := batch[done:]
		if len(rest) == 1 {
			return done, head, c.sendAlone(key, &head, rest[0])
		}
		n, err := c.requestGroup(key, &head, rest)
		done += n
		if errors.Is(err, errNoDaemon) || errors.Is(err, errNoGroups) {
			for _, a := range batch[done:] {
				if err := c.sendAlone(key, &head, a); err != nil {
					return done, head, err
				}
				done++
			}
			return done, head, nil
		}
		if err != nil {
			return done, head, err
		}
	}
	return done, head, nil
}

// errNoGroups is requestGroup's "this daemon does not take groups" (before checkpointd 0.5).
var errNoGroups = errors.New("the daemon does not take groups of saves")

// sendAlone stores one append onto *head with Append (chunked if large, on the ingest stream if
// no daemon answers) and moves *head on.
func (c *Client) sendAlone(key Key, head *uint64, a *asyncAppend) error {
	opts := []SaveOption{WithSaveID(a.saveID), WithReason(a.reason), WithEpoch(a.epoch)}
	v, err := c.Append(a.ctx, key, *head, a.messages, opts...)
	if err != nil {
		return err
	}
	*head = v.Version
	a.f.resolve(v, nil)
	return nil
}

// requestGroup sends the saves of group (at least two) as one request onto *head, retrying it
// whole while no reply comes or the daemon refuses it busy or unavailable (the saves already
// stored are then its duplicates). It resolves the futures of the saves stored, in order, moving
// *head on, and returns how many; an error is the failure of the save after them (or errNoDaemon:
// nobody answers group requests, nothing was sent).
func (c *Client) requestGroup(key Key, head *uint64, group []*asyncAppend) (int, error) {
	ctx, cancel := c.withTimeout(group[0].ctx)
	defer cancel()
	msg, sent := c.groupMessage(key, *head, group)
	defer groupBodies.Put(msg.Data) // nats.go copies what it publishes: the body is free once sent for the last time
	for try := 1; ; try++ {
		actx, acancel := context.WithTimeout(ctx, requestAttempt)
		reply, err := c.nc.RequestMsgWithContext(actx, msg)
		acancel()
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return 0, errNoDaemon
		case err == nil:
			n, again, err := c.takeGroupReply(ctx, key, head, group, sent, reply.Data, try)
			if again == 0 || err != nil {
				return n, err
			}
			if !sleepCtx(ctx, again) && n == 0 {
				return 0, unavailable("the daemon kept refusing the group of %d saves of %s (busy or unavailable); its saves were not stored", len(group), key)
			}
			if n > 0 { // the saves after those stored go as a group of their own
				return n, nil
			}
		case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrBadSubscription):
			return 0, unavailable("sending a group of saves on %s: %v", msg.Subject, err)
		case ctx.Err() != nil:
			return 0, unavailable("no checkpointd answered the group of %d saves on %s in time; their outcome is unknown: restore the session to see it", len(group), msg.Subject)
		default: // unanswered in time: send it again, the same saves
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return 0, unavailable("no checkpointd answered the group of saves on %s in time (%v)", msg.Subject, err)
			}
		}
	}
}

// groupMessage is the request of a group onto version head (docs/protocol.md §4.0.1), and the hash
// of each save's messages, which its result must carry.
func (c *Client) groupMessage(key Key, head uint64, group []*asyncAppend) (*nats.Msg, []string) {
	size := 0
	for _, a := range group {
		size += len(a.messages) + groupItemOverhead
	}
	body := groupBodies.Get(size)
	sent := make([]string, len(group))
	from := c.groupCompressFrom(size)
	for i, a := range group {
		fields := [][2]string{{wire.HdrSaveID, a.saveID}, {wire.HdrBaseVersion, strconv.FormatUint(head+uint64(i), 10)}}
		if a.reason != "" {
			fields = append(fields, [2]string{wire.HdrReason, a.reason})
		}
		if a.epoch != 0 {
			fields = append(fields, [2]string{wire.HdrEpoch, strconv.FormatUint(a.epoch, 10)})
		}
		data, encoding := encodeBody(a.messages, from)
		fields = append(fields, [2]string{wire.HdrEncoding, encoding})
		body = wire.AppendGroupItem(body, fields, data)
		sent[i] = wire.Hash(a.messages)
	}
	msg := nats.NewMsg(wire.SaveSubject(key))
	msg.Header.Set(wire.HdrGroup, strconv.Itoa(len(group)))
	msg.Header.Set(wire.HdrWriter, c.writer)
	msg.Data = body
	return msg, sent
}

// groupBodies holds the bodies of group requests sent, for the next ones: a burst's group is a few
// hundred KB (~250 KB for 54 of the corpus's pairs). Those over 4 MiB are not kept (a group is one
// message: max_payload's default is 1 MiB).
var groupBodies = bufpool.Pool{Max: 4 << 20}

// groupCompressFrom is the item size from which a group of size bytes (its items as they are)
// sends its items compressed. A group is a core NATS request, never stored as sent: over a
// loopback connection (the embedded server's default, 127.0.0.1) its bytes cost the server a copy,
// and zstd would cost the client a compression and the daemon a decompression of the same bytes,
// which the daemon compresses anyway as it stores them (about 9 µs of a save's ~95 µs with 50 agents
// appending the corpus's pairs, docs/format.md §8.15q). Elsewhere, when the items as they are would
// not fit one message (a single append larger than a group's room), or when WithCompressFrom was
// given, its threshold.
func (c *Client) groupCompressFrom(size int) int {
	if !c.compressFromSet && size <= c.groupRoom() && isLoopback(c.nc.ConnectedAddr()) {
		return math.MaxInt
	}
	return c.compressFrom
}

// isLoopback says whether addr (host:port, as nats.Conn.ConnectedAddr gives it) is a loopback
// address; anything else, a name or nothing (not connected), is not.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// takeGroupReply reads the reply to a group: it resolves the futures of the saves stored, in
// order, and returns how many, and the error of the first save that failed. A refusal of the whole
// group, or a first save refused busy or unavailable, is retryable: again says how long to wait.
func (c *Client) takeGroupReply(ctx context.Context, key Key, head *uint64, group []*asyncAppend, sent []string, data []byte, try int) (n int, again time.Duration, err error) {
	var rep groupReply
	if err := decodeGroupReply(data, &rep); err != nil {
		return 0, 0, &Error{Code: wire.CodeInternal, Message: "group reply: " + err.Error(), Index: -1, Offset: -1}
	}
	if rep.Key != nil {
		// A daemon before groups took the request for a save without a save id and refused it,
		// storing nothing: the saves go one by one.
		return 0, 0, errNoGroups
	}
	if rep.Error != nil {
		if wait, ok := retryableRefusal(wire.SaveResult{Error: rep.Error}, try); ok {
			return 0, wait, nil
		}
		return 0, 0, fromWire(rep.Error)
	}
	if len(rep.Results) != len(group) {
		return 0, 0, &Error{Code: wire.CodeCorrupt, Index: -1, Offset: -1,
			Message: fmt.Sprintf("group reply: %d results for %d saves of %s", len(rep.Results), len(group), key)}
	}
	for i, res := range rep.Results {
		if wait, ok := retryableRefusal(res, try); ok {
			return i, wait, nil // stored up to here: the rest is sent again
		}
		v, _, err := c.checkDecoded(ctx, res, key, group[i].saveID, sent[i])
		if err != nil {
			return i, 0, err
		}
		*head = v.Version
		group[i].f.resolve(v, nil)
	}
	return len(group), 0, nil
}
