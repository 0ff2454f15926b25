package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/pieces"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// SaveOption configures one Save.
type SaveOption func(*saveOptions)

type saveOptions struct {
	saveID   string
	expected *uint64
	reason   string
	forkOf   *wire.ForkRef
	epoch    uint64
	imported *Version // import: the original record to copy
	via      string   // import: migrate or import
	source   string   // import: where from
	dialect  string   // the conversation's shape; "" is native
	// whole is the whole conversation the save stores (Save knows it, also when it sends only
	// what it appended; Append does not): a duplicate's version must hash as it does.
	whole []byte
}

// wholeConversation tells save the whole conversation it stores (Save's own option).
func wholeConversation(b []byte) SaveOption { return func(o *saveOptions) { o.whole = b } }

// WithEpoch makes the save carry a lease epoch: it is refused with ErrFenced unless that is the
// session's current lease. Lease.Save sets it for you.
func WithEpoch(epoch uint64) SaveOption { return func(o *saveOptions) { o.epoch = epoch } }

// WithSaveID sets the save's idempotency key. Saving again with the same id (a retry after a lost
// reply, a replayed publish) yields the version the first save created, not a new one; saving
// another conversation under an id already used is refused with ErrSaveIDReused (nothing stored).
// By default every Save gets a fresh id.
func WithSaveID(id string) SaveOption { return func(o *saveOptions) { o.saveID = id } }

// ExpectVersion makes the save conditional: it is refused with ErrConflict unless the session's head
// is version n (0: the session must not exist yet). The *Error's Head says where the head is.
func ExpectVersion(n uint64) SaveOption { return func(o *saveOptions) { o.expected = &n } }

// WithReason records why the version was written: turn (default), pause, migrate, import or manual.
func WithReason(reason string) SaveOption { return func(o *saveOptions) { o.reason = reason } }

// WithDialect names the shape of the conversation saved: native (the default), or another of
// the daemon's dialects (docs/format.md, "Dialects"; Dialects lists them). The daemon validates the
// conversation as that dialect and records it on the version (Version.Dialect); a session keeps
// one dialect, so a save in another is refused with ErrBadRequest.
func WithDialect(name string) SaveOption { return func(o *saveOptions) { o.dialect = name } }

// Dialects returns the names of the dialects this SDK knows.
func Dialects() []string { return codec.Dialects() }

// Save stores conversation, a JSON array of messages, as the next version of key's session and
// returns that version. When Save returns nil the version is durable and any process can restore it.
// Only what the head lacks is stored: resending a grown array costs its new messages (hashing the
// rest), and a changed or removed message is stored as a rewrite that keeps the old versions.
//
// The client remembers the bytes of its last save of each session: when the new array extends them,
// only the new messages travel (as an Append), so a save costs the same at any conversation size.
//
// The save goes to a daemon as a request (docs/protocol.md §4.0). When no daemon listens, it is
// queued on the ingest stream until one settles it (§4.1); but a client that a daemon has answered
// before asks again for up to 2 s first, since nobody listening is then most likely the daemons
// reconnecting (a server lost, a rolling restart).
func (c *Client) Save(ctx context.Context, key Key, conversation []byte, opts ...SaveOption) (Version, error) {
	conversation = bytes.TrimRight(conversation, " \t\r\n")
	k := key.WithDefaults()
	o := parseSaveOptions(opts)
	opts = append(opts, WithSaveID(o.saveID), wholeConversation(conversation)) // the same id for every attempt below
	if last, tail, ok := c.delta(k, conversation, o); ok {
		v, err := c.save(ctx, key, tail, &last.version, opts)
		if err == nil {
			c.rememberAppended(k, v, last, conversation)
			return v, nil
		}
		if !errors.Is(err, ErrConflict) || errors.Is(err, ErrSaveIDReused) || o.expected != nil {
			c.remember(k, v, conversation, err)
			return v, err
		}
		// Another writer moved the head: send the whole array, as the caller asked. It is a new
		// publish (the refused one would be dropped as a duplicate) under a derived save id, so a
		// retry of this Save with the same id still makes one version.
		opts = append(opts, WithSaveID(o.saveID+".whole"))
	}
	v, err := c.save(ctx, key, conversation, nil, opts)
	c.remember(k, v, conversation, err)
	return v, err
}

// lastSave is what the client saved last for one session.
type lastSave struct {
	version uint64
	body    []byte
}

// delta returns the last save of key and the messages conversation adds to it, when it extends it.
func (c *Client) delta(key Key, conversation []byte, o saveOptions) (lastSave, []byte, bool) {
	c.mu.Lock()
	last, ok := c.last[key]
	c.mu.Unlock()
	if !ok || len(last.body) < 3 {
		return lastSave{}, nil, false
	}
	if o.expected != nil && *o.expected != last.version {
		return lastSave{}, nil, false
	}
	n := len(last.body) - 1 // without the closing "]"
	if len(conversation) <= n+1 || conversation[n] != ',' || !bytes.Equal(conversation[:n], last.body[:n]) {
		return lastSave{}, nil, false
	}
	tail := make([]byte, 0, len(conversation)-n)
	return last, append(append(tail, '['), conversation[n+1:]...), true
}

// rememberAppended remembers conversation, which extends prev, by appending what it adds to the
// copy kept of prev: a save costs a copy of the new messages, not of the whole conversation. The
// copy is extended in place only while it is still the one remembered; readers of it (delta) read
// no further than its closing "]", and appends write from there on.
func (c *Client) rememberAppended(key Key, v Version, prev lastSave, conversation []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.last[key]
	if !ok || cur.version != prev.version || len(cur.body) != len(prev.body) {
		c.last[key] = lastSave{version: v.Version, body: bytes.Clone(conversation)}
		return
	}
	n := len(cur.body) - 1
	c.last[key] = lastSave{version: v.Version, body: append(cur.body[:n], conversation[n:]...)}
}

func (c *Client) remember(key Key, v Version, body []byte, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		// An unknown outcome keeps what was remembered: a retry with the same save id then sends
		// the same bytes, which the daemon's result must hash to (checkResult).
		if !errors.Is(err, ErrUnavailable) {
			delete(c.last, key)
		}
		return
	}
	c.last[key] = lastSave{version: v.Version, body: bytes.Clone(body)}
}

func parseSaveOptions(opts []SaveOption) saveOptions {
	o := saveOptions{saveID: nuid.Next()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Append stores the messages appended to version base (a JSON array of just the new messages) as
// the next version. base must be the session's head, or the save is refused with ErrConflict: an
// agent that knows what it added since its last checkpoint sends only that, whatever the
// conversation's size.
func (c *Client) Append(ctx context.Context, key Key, base uint64, messages []byte, opts ...SaveOption) (Version, error) {
	return c.save(ctx, key, messages, &base, opts)
}

func (c *Client) save(ctx context.Context, key Key, conversation []byte, base *uint64, opts []SaveOption) (Version, error) {
	key, err := checkKey(key)
	if err != nil {
		return Version{}, err
	}
	o := parseSaveOptions(opts)
	if err := wire.ValidateID(o.saveID); err != nil {
		return Version{}, &Error{Code: wire.CodeBadRequest, Message: "save id: " + err.Error(), Index: -1, Offset: -1}
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()

	hdr := saveHeaders(o, base, c.writer)
	// The JetStream message id makes the attempts of this call count once. It is the save id and a
	// random part: JetStream drops repeats of a message id across every namespace, so an id another
	// tenant could guess (a save id like "turn-8") would let that tenant get this save dropped. A
	// repeat of the save id in another call is recognised by the daemon instead.
	msgID := o.saveID + "/" + nuid.Next()
	// The hash the result is checked against is computed while the body is compressed and
	// travels: on a conversation of megabytes it is a millisecond off the save's latency. Every
	// return waits for it: the caller's bytes are not read after Save returns.
	sent := wire.HashBeside(conversation)
	defer sent()
	size := pieces.Size(c.nc.MaxPayload(), pieces.ChunkRoom)
	body, encoding := encodeBody(conversation, c.saveCompressFrom(len(conversation), size))
	hdr.Set(wire.HdrEncoding, encoding)
	if int64(len(body)) > size {
		n, err := c.publishChunks(ctx, key.Namespace, o.saveID, msgID, body, size)
		if err != nil {
			return Version{}, err
		}
		hdr.Set(wire.HdrChunks, strconv.Itoa(n))
		body = nil
	}
	res, err := c.send(ctx, key, o.saveID, msgID, hdr, body)
	if err != nil {
		return Version{}, err
	}
	v, duplicate, err := c.checkDecoded(ctx, res, key, o.saveID, sent())
	if err != nil || !duplicate {
		return v, err
	}
	v.Unverified = res.Unverified // what the daemon could not compare, said to the caller
	if o.whole != nil {
		var compared bool
		if compared, err = checkRepeat(v, o); compared {
			v.Unverified = "" // the SDK compared what the daemon could not
		}
	}
	return v, err
}

// DefaultCompressFrom is the size from which a save's body travels compressed unless
// WithCompressFrom says otherwise. Below it zstd costs the writer more than the bytes cost a local
// network: ~5 µs to compress and ~5 µs for the daemon to decode whatever the size (the frame's
// setup), and for the corpus's 19.5 KB ~0.1–0.25 ms with its match tables cold between saves
// (docs/format.md §8.15j, §8.15l); the daemon compresses what it stores anyway.
const DefaultCompressFrom = 32 << 10

// saveCompressFrom is the size from which a save of n bytes is sent compressed, when a message
// holds room bytes. Over a loopback connection (the embedded server's default, 127.0.0.1) a body
// that fits one message as it is travels as it is: its bytes cost the server a copy, while zstd
// would cost the writer a compression and the daemon a decompression of the same bytes, which the
// daemon compresses anyway as it stores them (docs/format.md §8.15r; groups do the same, §8.15q).
// A larger body is compressed, to travel in fewer chunks. Elsewhere, or when WithCompressFrom was
// given, its threshold (which a body under it keeps without asking the connection).
func (c *Client) saveCompressFrom(n int, room int64) int {
	if !c.compressFromSet && n >= c.compressFrom && int64(n) <= room && isLoopback(c.nc.ConnectedAddr()) {
		return math.MaxInt
	}
	return c.compressFrom
}

// encodeBody returns the body to send for conversation and its encoding (Cp-Encoding): zstd (in
// parallel frames when large) from `from` bytes on, the bytes as they are below it. A save and
// each item of a group are encoded by it.
func encodeBody(conversation []byte, from int) (body []byte, encoding string) {
	if len(conversation) < from {
		return conversation, wire.EncodingIdentity
	}
	return codec.CompressBody(conversation), wire.EncodingZstd
}

// checkRepeat checks a duplicate's version against the whole conversation this save stores: a
// save id used before for another conversation must not pass for this save. The daemon refuses
// that itself (save_id_reused) whenever it reads the body; this covers what it cannot tell (a
// chunked save whose chunks it already removed) and daemons before that check. The SDK can tell
// only when it knows the conversation as the daemon would store it: not when the daemon would
// refuse it, nor when it names local image files (the daemon may redact them). compared says it
// could tell (and the conversation is the version's, when err is nil).
func checkRepeat(v Version, o saveOptions) (compared bool, err error) {
	if wire.Hash(o.whole) == v.Hash {
		return true, nil
	}
	c, err := codec.ParseLimited(o.whole, codec.Limits{Dialect: o.dialect, ImagePaths: codec.ImagePathsRefuse})
	if err != nil {
		return false, nil // cannot tell
	}
	canonical := append(append([]byte{'['}, c.Span(0, len(c.Messages))...), ']')
	if sent := wire.Hash(canonical); sent != v.Hash {
		return true, &Error{Code: wire.CodeSaveIDReused, Version: v.Version, Index: -1, Offset: -1,
			Message: fmt.Sprintf("save id %q was already used for another conversation: version %d (%s) of %s; this conversation hashes to %s. Save it under a new save id",
				o.saveID, v.Version, v.Hash, v.Key, sent)}
	}
	return true, nil
}

// send delivers a save and returns its result: as a request to a daemon, answered once the save is
// durable (docs/protocol.md §4.0), or, when no daemon answers requests (or WithIngestSaves), on the
// ingest stream, which keeps the save until a daemon settles it (§4.1).
func (c *Client) send(ctx context.Context, key Key, saveID, msgID string, hdr nats.Header, body []byte) (wire.SaveResult, error) {
	if !c.ingestOnly {
		res, err := c.requestSave(ctx, key, saveID, hdr, body)
		if !errors.Is(err, errNoDaemon) {
			return res, err
		}
	}
	data, err := c.ingestSave(ctx, key, saveID, msgID, hdr, body)
	if err != nil {
		return wire.SaveResult{}, err
	}
	return decodeResult(data)
}

// saveHeaders are the headers of a save (docs/protocol.md §4.1), the same on both paths.
func saveHeaders(o saveOptions, base *uint64, writer string) nats.Header {
	h := nats.Header{}
	h.Set(wire.HdrSaveID, o.saveID)
	h.Set(wire.HdrWriter, writer)
	if o.reason != "" {
		h.Set(wire.HdrReason, o.reason)
	}
	if o.expected != nil {
		h.Set(wire.HdrExpectedVersion, strconv.FormatUint(*o.expected, 10))
	}
	if base != nil {
		h.Set(wire.HdrBaseVersion, strconv.FormatUint(*base, 10))
	}
	if o.forkOf != nil {
		h.Set(wire.HdrForkOf, o.forkOf.String())
	}
	if o.epoch != 0 {
		h.Set(wire.HdrEpoch, strconv.FormatUint(o.epoch, 10))
	}
	if o.dialect != "" && o.dialect != codec.DialectNative { // native goes without the header
		h.Set(wire.HdrDialect, o.dialect)
	}
	if v := o.imported; v != nil {
		h.Set(wire.HdrImportVersion, strconv.FormatUint(v.Version, 10))
		h.Set(wire.HdrImportCreated, v.Created.UTC().Format(time.RFC3339Nano))
		h.Set(wire.HdrHash, v.Hash)
		h.Set(wire.HdrImportVia, o.via)
		h.Set(wire.HdrImportSource, o.source)
		h.Set(wire.HdrWriter, v.Writer)
		h.Set(wire.HdrReason, v.Reason)
		if v.ForkOf != nil {
			h.Set(wire.HdrForkOf, v.ForkOf.String())
		}
		if v.Dialect != "" { // a copy keeps the original's dialect
			h.Set(wire.HdrDialect, v.Dialect)
		}
	}
	return h
}

// errNoDaemon is requestSave's "no responders": no daemon listens on the save subject (none runs,
// or one too old to take saves as requests). The save goes to the ingest stream instead.
var errNoDaemon = errors.New("no checkpointd answers save requests")

// A client that has had a save request answered, and then gets "no responders", most likely sees
// the daemons reconnecting (the server they were on died, a rolling restart): for the moment that
// takes, nobody is subscribed. It sends the request again for up to noRespondersWindow, pausing
// noRespondersFirstWait at first and twice as long each time (at most noRespondersMaxWait), before
// falling back to the ingest stream: a save there waits for a daemon to pull it, and settling it
// needs more of the cluster (its consumer, CP_RESULTS) than a request does. A client that never had
// an answer (daemons that do not take requests) falls back at once, and so does one whose window
// ran out once, until a daemon answers it again. (CI: TestCluster_Harness, a save sent 14 ms
// after the kill of the node both daemons were connected to.)
const (
	noRespondersWindow    = 2 * time.Second
	noRespondersFirstWait = 50 * time.Millisecond
	noRespondersMaxWait   = 500 * time.Millisecond
)

// noResponders is one save's run of "no responders" answers.
type noResponders struct {
	since time.Time     // the first
	wait  time.Duration // the pause before the next attempt
}

// again reports whether the request should be sent again after "no responders", having waited
// for it; false: fall back to the ingest stream.
func (n *noResponders) again(ctx context.Context, c *Client) bool {
	if !c.answered.Load() {
		return false
	}
	if n.since.IsZero() {
		n.since, n.wait = time.Now(), noRespondersFirstWait
	}
	if time.Since(n.since)+n.wait > noRespondersWindow {
		c.answered.Store(false) // no daemon came back: the next saves fall back at once
		return false
	}
	if !sleepCtx(ctx, n.wait) {
		return false
	}
	n.wait = min(2*n.wait, noRespondersMaxWait)
	return true
}

// requestAttempt bounds one save request, and requestAttemptPerChunk adds to it for each chunk
// the daemon reads; a request unanswered in that time is sent again with the same save id (the
// daemon recognises the repeat). maxRequestAttempt is the daemon's own bound on settling one.
const (
	requestAttempt         = 5 * time.Second
	requestAttemptPerChunk = time.Second
	maxRequestAttempt      = 30 * time.Second
)

// requestSave sends the save as a core NATS request to the daemons (docs/protocol.md §4.0) and
// returns the result the reply carries, once the save is durable. It returns errNoDaemon when
// nobody listens (after a short while, if daemons answered this client before: see
// noRespondersWindow). A request unanswered in time is sent again, and a busy or unavailable
// refusal (nothing was stored) is retried after the wait it hints at, until ctx ends; then the
// last refusal is returned as the result. The reply is decoded once, here.
func (c *Client) requestSave(ctx context.Context, key Key, saveID string, hdr nats.Header, body []byte) (wire.SaveResult, error) {
	subject := wire.SaveSubject(key)
	attempt := requestAttempt
	if n, err := strconv.Atoi(hdr.Get(wire.HdrChunks)); err == nil {
		attempt = min(attempt+time.Duration(n)*requestAttemptPerChunk, maxRequestAttempt)
	}
	var quiet noResponders
	for try := 1; ; try++ {
		actx, cancel := context.WithTimeout(ctx, attempt)
		reply, err := c.nc.RequestMsgWithContext(actx, &nats.Msg{Subject: subject, Header: hdr, Data: body})
		cancel()
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			if !quiet.again(ctx, c) {
				return wire.SaveResult{}, errNoDaemon
			}
		case err == nil:
			c.answered.Store(true)
			res, err := decodeResult(reply.Data)
			if err != nil {
				return res, err
			}
			wait, again := retryableRefusal(res, try)
			if !again || !sleepCtx(ctx, wait) {
				return res, nil
			}
		case errors.Is(err, nats.ErrMaxPayload):
			return wire.SaveResult{}, &Error{Code: wire.CodeTooLarge, Message: err.Error(), Index: -1, Offset: -1}
		case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrBadSubscription):
			return wire.SaveResult{}, unavailable("sending the save on %s: %v", subject, err)
		case ctx.Err() != nil:
			return wire.SaveResult{}, unavailable("no checkpointd answered the save on %s in time; its outcome is unknown: "+
				"restore the session to see it, or save again with the same save id (%s)", subject, saveID)
		default:
			// Unanswered in time (the daemon died, or is slow), or the connection is moving to
			// another server: send it again, with the same save id.
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return wire.SaveResult{}, unavailable("no checkpointd answered the save on %s in time (%v); save again with the same save id (%s)", subject, err, saveID)
			}
		}
	}
}

// retryableRefusal reports whether a save's result is a refusal that stored nothing and may go
// through later (busy, or unavailable: a daemon shutting down, storage briefly away), and how long
// to wait before the attempt after try.
func retryableRefusal(res wire.SaveResult, try int) (time.Duration, bool) {
	if res.Error == nil {
		return 0, false
	}
	switch res.Error.Code {
	case wire.CodeBusy:
		var hint time.Duration
		if ms := res.Error.RetryAfterMillis; ms != nil {
			hint = time.Duration(*ms) * time.Millisecond
		}
		return busyWait(hint, try), true
	case wire.CodeUnavailable:
		return busyWait(0, try), true
	}
	return 0, false
}

// sleepCtx waits d, and reports false if ctx ended first (or would end before d is up).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ingestSave publishes the save to the ingest stream (docs/protocol.md §4.1), the fallback when no
// daemon answers requests: the PubAck means it is durable, and its result comes when a daemon has
// settled it.
func (c *Client) ingestSave(ctx context.Context, key Key, saveID, msgID string, hdr nats.Header, body []byte) ([]byte, error) {
	// Subscribe to the outcome before publishing, so it cannot slip past.
	resultSubject := wire.ResultSubject(key.Namespace, saveID)
	sub, err := c.nc.SubscribeSync(resultSubject)
	if err != nil {
		return nil, unavailable("subscribing to %s: %v", resultSubject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if _, err := c.publish(ctx, &nats.Msg{Subject: wire.IngestSubject(key), Header: hdr, Data: body}, msgID); err != nil {
		return nil, err
	}
	return c.awaitResult(ctx, sub, resultSubject)
}

// publishAttempt bounds one publish: a publish sent to a stream leader that just died is never
// acknowledged, and the next attempt reaches the newly elected leader.
const publishAttempt = 2 * time.Second

// noStreamRetries is how many times a publish nobody answers is retried on a single server before
// it counts as "no stream": there it cannot be an election. In a cluster it is retried until ctx
// ends, since the stream's leader may be dead and its successor not elected yet (seconds).
const noStreamRetries = 4

// publish sends msg until JetStream acknowledges it or ctx ends, and returns its stream sequence.
// Every attempt carries the same message id, so an attempt that was stored but not acknowledged is
// not stored twice (the acknowledgement of a repeat names the first one's sequence).
func (c *Client) publish(ctx context.Context, msg *nats.Msg, id string) (uint64, error) {
	noStream := 0
	for {
		actx, cancel := context.WithTimeout(ctx, publishAttempt)
		ack, err := c.js.PublishMsg(actx, msg, jetstream.WithMsgID(id))
		cancel()
		switch {
		case err == nil:
			return ack.Sequence, nil
		case ctx.Err() != nil:
			return 0, publishError(err)
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
			// Unanswered: a leader being elected. Try again.
		case errors.Is(err, jetstream.ErrNoStreamResponse) && (noStream < noStreamRetries || c.nc.ConnectedClusterName() != ""):
			// No stream answers: an election, or no checkpointd ever ran here. Give it a
			// moment, then say so.
			noStream++
			select {
			case <-ctx.Done():
				return 0, publishError(err)
			case <-time.After(250 * time.Millisecond):
			}
		default:
			return 0, publishError(err)
		}
	}
}

// publishChunks sends body in pieces of at most size bytes (docs/protocol.md §12) and waits until
// each is durable. The daemon reads the pieces in stream order, so they must be stored in order.
// They go out together, each tried once; from the first one not acknowledged (a leader lost),
// they are sent again one at a time, in order, and their message ids make the ones already stored
// count once. The stream sequences in the acknowledgements prove the order.
func (c *Client) publishChunks(ctx context.Context, ns, saveID, msgID string, body []byte, size int64) (int, error) {
	cut, err := pieces.Split(body, size)
	if err != nil {
		return 0, &Error{Code: wire.CodeTooLarge, Message: fmt.Sprintf("save %s: the server's max_payload of %d bytes: %v", saveID, c.nc.MaxPayload(), err), Index: -1, Offset: -1}
	}
	subject := wire.ChunkSubject(ns, saveID)
	msgs := make([]*nats.Msg, len(cut))
	for i, p := range cut {
		msgs[i] = nats.NewMsg(subject)
		msgs[i].Header.Set(wire.HdrChunk, strconv.Itoa(i))
		msgs[i].Data = p
	}
	id := func(i int) string { return msgID + "." + strconv.Itoa(i) }
	var futures []jetstream.PubAckFuture
	for i, m := range msgs {
		// No retry inside nats.go: a piece retried there could be stored after the next one.
		f, err := c.js.PublishMsgAsync(m, jetstream.WithMsgID(id(i)), jetstream.WithRetryAttempts(0))
		if err != nil {
			break // the rest are sent one at a time below
		}
		futures = append(futures, f)
	}
	var seqs []uint64
	for _, f := range futures {
		ack, ok := awaitFuture(ctx, f)
		if !ok {
			break
		}
		seqs = append(seqs, ack.Sequence)
	}
	for i := len(seqs); i < len(msgs); i++ {
		seq, err := c.publish(ctx, msgs[i], id(i))
		if err != nil {
			return 0, err
		}
		seqs = append(seqs, seq)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			return 0, unavailable("the pieces of save %s were stored out of order while a stream leader changed "+
				"(piece %d at sequence %d, piece %d at %d); save again under a new save id", saveID, i-1, seqs[i-1], i, seqs[i])
		}
	}
	return len(msgs), nil
}

// awaitFuture returns the acknowledgement of an asynchronous publish, if it came within
// publishAttempt.
func awaitFuture(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, bool) {
	t := time.NewTimer(publishAttempt)
	defer t.Stop()
	select {
	case ack := <-f.Ok():
		return ack, true
	case <-f.Err():
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, false
}

// awaitResult waits for the daemon's outcome of the save and returns its body: on the subscription
// and, when it is slow to come, by asking CP_RESULTS for the save id's stored outcome
// (lookupResult): one published before we listened (a duplicate save) or while this connection was
// moving to another server (the one it was on died) is found there. No single wait is long: a
// request sent to a node that has just died is never answered, and only the next one reaches a
// node that lives. checkResult decides whether to believe it.
func (c *Client) awaitResult(ctx context.Context, sub *nats.Subscription, subject string) ([]byte, error) {
	wait := 250 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(ctx, wait)
		m, err := sub.NextMsgWithContext(wctx)
		cancel()
		if err == nil {
			return m.Data, nil
		}
		if ctx.Err() != nil {
			return nil, unavailable("the save was published and is durable, but its outcome did not arrive in time; "+
				"restore the session to see it, or save again with the same save id (%s)", subject)
		}
		if data, ok := c.lookupResult(ctx, subject); ok {
			return data, nil
		}
		wait = min(2*wait, time.Second)
	}
}

// lookupAttempt bounds one request for a stored outcome.
const lookupAttempt = time.Second

// lookupResult gets the outcome stored on subject with a direct get (docs/protocol.md §4.3), which
// any replica of CP_RESULTS answers: it needs neither the stream's leader (which may be dead and
// not yet replaced) nor a stream info request (which goes unanswered meanwhile, and which a tenant
// may not make). ok is false when there is none yet, or no answer within lookupAttempt.
func (c *Client) lookupResult(ctx context.Context, subject string) (data []byte, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, lookupAttempt)
	defer cancel()
	m, err := c.nc.RequestWithContext(ctx, wire.ResultDirectGetPrefix+subject, nil)
	if err != nil || m.Header.Get("Status") != "" || m.Header.Get("Nats-Subject") != subject {
		return nil, false // no replica answered, or it has no such message (404) yet
	}
	return m.Data, true
}

// checkResult decodes the outcome of a save and checks that it is the outcome of this save. The
// daemon returns the hash of the body it read; when that is the hash of what was sent (sent), the
// result is believed. Otherwise (a result without it, or one for other bytes: an earlier attempt
// of the same save id that sent the conversation another way, or a result the daemon did not
// write) a version it names is confirmed with the daemon, whose record must carry this save id,
// and a refusal is not believed. Anything unconfirmed is ErrCorrupt, never a success. The bool
// says the version is a duplicate (the save id made it before).
func (c *Client) checkResult(ctx context.Context, data []byte, key Key, saveID, sent string) (Version, bool, error) {
	res, err := decodeResult(data)
	if err != nil {
		return Version{}, false, err
	}
	return c.checkDecoded(ctx, res, key, saveID, sent)
}

// decodeResult decodes the result of a save, as it came.
func decodeResult(data []byte) (wire.SaveResult, error) {
	if res, ok := wire.PlainSaveResult(data); ok { // the daemon's result of a stored save, without encoding/json
		return res, nil
	}
	var res wire.SaveResult
	if err := json.Unmarshal(data, &res); err != nil {
		return wire.SaveResult{}, &Error{Code: wire.CodeInternal, Message: "save result: " + err.Error(), Index: -1, Offset: -1}
	}
	return res, nil
}

// checkDecoded is checkResult of a result already decoded.
func (c *Client) checkDecoded(ctx context.Context, res wire.SaveResult, key Key, saveID, sent string) (Version, bool, error) {
	corrupt := func(format string, args ...any) error {
		return &Error{Code: wire.CodeCorrupt, Message: fmt.Sprintf("save %s of %s: ", saveID, key) + fmt.Sprintf(format, args...), Index: -1, Offset: -1}
	}
	if res.SaveID != saveID || res.Key != key {
		return Version{}, false, corrupt("the result names save %q of %s", res.SaveID, res.Key)
	}
	if res.Error != nil {
		if res.Received != "" && res.Received != sent {
			return Version{}, false, corrupt("the refusal is of a body with hash %s, but %s was sent", res.Received, sent)
		}
		return Version{}, false, fromWire(res.Error)
	}
	if !res.OK || res.Version == nil {
		return Version{}, false, &Error{Code: wire.CodeInternal, Message: "save result has neither a version nor an error", Index: -1, Offset: -1}
	}
	if res.Received == sent {
		return *res.Version, res.Duplicate, nil
	}
	v, err := c.Get(ctx, key, res.Version.Version)
	if errors.Is(err, ErrNotFound) {
		return Version{}, false, corrupt("the result names version %d, which does not exist", res.Version.Version)
	}
	if err != nil {
		return Version{}, false, err
	}
	if v.SaveID != saveID {
		return Version{}, false, corrupt("the result names version %d, which save %q made", v.Version, v.SaveID)
	}
	return v, res.Duplicate, nil
}

func publishError(err error) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return unavailable("no JetStream stream accepted the save (has checkpointd ever started on this server? If it runs with "+
			"--tenants, a login saves only to its own namespace): %v", err)
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return &Error{Code: wire.CodeTooLarge, Message: err.Error(), Index: -1, Offset: -1}
	}
	return unavailable("publishing the save: %v", err)
}
