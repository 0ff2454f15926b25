package transfer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// ingester takes saves off CP_INGEST, turns each into a version (or a refusal) and publishes the
// outcome on CP_RESULTS. A save leaves the work queue only after its outcome is published, so a
// crash at any point means it is delivered again; the save id makes the second pass a no-op.
type ingester struct {
	js       jetstream.JetStream
	st       *streams
	store    snapshot.Store
	maxBytes int64
	log      *slog.Logger
	m        *metrics.Metrics
	now      func() time.Time
	// compactor merges the segments of sessions this daemon saved to.
	compactor *compactor

	cc    jetstream.ConsumeContext
	lanes []chan jetstream.Msg
	wg    sync.WaitGroup
	ctx   context.Context // cancelled only when shutdown must stop waiting on storage
	stop  context.CancelFunc
}

// ackWait is how soon a save taken by a daemon that died is offered to another. Reads of the session
// wait for it meanwhile, so it is short; saves that take longer keep their claim with heartbeats.
const ackWait = 10 * time.Second

// maxAttempts bounds redeliveries of a save that keeps failing on storage errors. After that its
// refusal (code unavailable) is published, so the writer learns of it: never a silent drop.
const maxAttempts = 20

func (in *ingester) start(ctx context.Context, lanes int) error {
	cons, err := in.st.ingest.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       ingestConsumer,
		Description:   "checkpointd instances share this consumer",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxAckPending: 1024,
		FilterSubject: "cp.ingest.>",
	})
	if err != nil {
		return fmt.Errorf("ingest consumer: %w", err)
	}
	in.ctx, in.stop = context.WithCancel(context.Background())
	// Saves of one session always go to the same lane, so they are settled in the order they were
	// published; different sessions proceed in parallel.
	in.lanes = make([]chan jetstream.Msg, lanes)
	for i := range in.lanes {
		in.lanes[i] = make(chan jetstream.Msg, 16)
		in.wg.Add(1)
		go func(c chan jetstream.Msg) {
			defer in.wg.Done()
			for msg := range c {
				in.handle(msg)
			}
		}(in.lanes[i])
	}
	in.cc, err = cons.Consume(func(msg jetstream.Msg) {
		h := fnv.New32a()
		_, _ = h.Write([]byte(msg.Subject()))
		in.lanes[h.Sum32()%uint32(len(in.lanes))] <- msg
	}, jetstream.PullMaxMessages(64),
		// Short pulls: after a consumer leader change (a node lost) the next pull finds the new
		// leader within seconds, instead of waiting out a missed 30 s request.
		jetstream.PullExpiry(5*time.Second),
		// ...and a consumer leader that died is noticed after two missed heartbeats (2 s), not the
		// default's 5 s, so the pulls go to its successor soon after the election.
		jetstream.PullHeartbeat(time.Second),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			in.log.Warn("ingest: consumer", "err", err)
		}))
	if err != nil {
		return fmt.Errorf("ingest consume: %w", err)
	}
	return nil
}

// shutdown stops taking new saves and finishes the ones already taken. If ctx ends first, the
// saves still in flight are abandoned unacknowledged and are redelivered to the next daemon.
func (in *ingester) shutdown(ctx context.Context) {
	if in.cc == nil {
		return
	}
	in.cc.Drain()
	select {
	case <-in.cc.Closed():
	case <-ctx.Done():
		in.stop() // unblock workers waiting on storage, so the consume callback can return
		in.cc.Stop()
		<-in.cc.Closed()
	}
	// The callback has returned for good: no more sends on the lanes.
	for _, c := range in.lanes {
		close(c)
	}
	done := make(chan struct{})
	go func() { in.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		in.stop()
		<-done
	}
}

func (in *ingester) handle(msg jetstream.Msg) {
	start := in.now()
	meta, err := msg.Metadata()
	if err != nil {
		in.log.Error("ingest: message without metadata", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	key, err := wire.ParseToken(strings.TrimPrefix(msg.Subject(), "cp.ingest."))
	if err != nil {
		// Without a namespace there is nowhere to publish a refusal; the publisher got a PubAck from
		// a subject no client library writes. Log it loudly and drop it from the queue.
		in.log.Error("ingest: refusing save on a malformed subject", "subject", msg.Subject(), "seq", meta.Sequence.Stream, "err", err)
		in.m.Saves.WithLabelValues(wire.CodeBadRequest).Inc()
		_ = msg.Term()
		return
	}
	saveID := msg.Headers().Get(wire.HdrSaveID)
	if wire.ValidateID(saveID) != nil {
		saveID = "seq-" + strconv.FormatUint(meta.Sequence.Stream, 10)
	}
	ctx, cancel := context.WithTimeout(in.ctx, 30*time.Second)
	defer cancel()
	go heartbeat(ctx, msg)

	res, chunks, err := in.prior(ctx, key, saveID)
	if res.Version == nil && err == nil {
		res, chunks, err = in.settle(ctx, key, saveID, msg)
	}
	if err != nil {
		if meta.NumDelivered < maxAttempts {
			in.log.Warn("ingest: storage error, will retry", "session", key, "save", saveID, "attempt", meta.NumDelivered, "err", err)
			_ = msg.NakWithDelay(time.Duration(min(meta.NumDelivered, 10)) * 200 * time.Millisecond)
			return
		}
		res = wire.SaveResult{Error: &wire.Error{Code: wire.CodeUnavailable,
			Message: fmt.Sprintf("gave up after %d attempts: %v", meta.NumDelivered, err)}}
	}
	res.SaveID, res.Key = saveID, key
	if err := in.publishResult(ctx, res); err != nil {
		in.log.Warn("ingest: publishing result failed, will retry", "session", key, "save", saveID, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if msg.Headers().Get(wire.HdrChunks) != "" { // settled, accepted or refused: its chunks can go
		subj := wire.ChunkSubject(key.Namespace, saveID)
		if err := in.st.chunks.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			in.log.Warn("ingest: could not remove settled chunks; they expire with the stream's max age", "subject", subj, "err", err)
		}
	}
	if err := in.ack(ctx, msg); err != nil {
		// The outcome is stored; a redelivery finds the save id at the head and changes nothing.
		in.log.Warn("ingest: ack failed", "session", key, "save", saveID, "err", err)
	}
	in.observe(res, start)
	if chunks >= largeSaveChunks {
		// The save's buffers (tens of MiB) are garbage now: collect them before the next large
		// allocation (its restore, typically) instead of letting the heap grow to twice its size.
		runtime.GC()
	}
}

// maxRatio bounds how much larger than its compressed size a body's buffer is sized up front; a
// body that really is larger still decodes (the buffer grows), within the size limit.
const maxRatio = 32

// largeSaveChunks is the chunk count from which a save counts as large (about 16 MiB compressed).
const largeSaveChunks = 16

// heartbeat tells JetStream the save is still being worked on until ctx ends.
func heartbeat(ctx context.Context, msg jetstream.Msg) {
	t := time.NewTicker(ackWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = msg.InProgress()
		}
	}
}

// prior returns the stored outcome of a save id that was already stored for this session. JetStream
// drops duplicate publishes for two minutes; this keeps a replayed save from becoming a new version
// for as long as results are kept. Refusals are settled again: the session may have changed since.
func (in *ingester) prior(ctx context.Context, key wire.Key, saveID string) (wire.SaveResult, int, error) {
	m, err := in.st.read.last(ctx, in.st.results, wire.ResultSubject(key.Namespace, saveID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return wire.SaveResult{}, 0, nil
	}
	if err != nil {
		return wire.SaveResult{}, 0, err
	}
	var res wire.SaveResult
	if json.Unmarshal(m.Data, &res) != nil || !res.OK || res.Version == nil || res.Key != key {
		return wire.SaveResult{}, 0, nil
	}
	res.Duplicate = true
	return res, 0, nil
}

// settle decides the outcome of one save. A returned error is transient (storage); refusals are
// part of the result.
func (in *ingester) settle(ctx context.Context, key wire.Key, saveID string, msg jetstream.Msg) (wire.SaveResult, int, error) {
	refuse := func(err error) (wire.SaveResult, int, error) {
		return wire.SaveResult{Error: toWireError(err)}, 0, nil
	}
	h := msg.Headers()
	req := snapshot.SaveRequest{Key: key, SaveID: saveID, Writer: h.Get(wire.HdrWriter), Reason: h.Get(wire.HdrReason), Now: in.now()}
	if req.Reason != "" && !wire.ValidReason(req.Reason) {
		return refuse(fmt.Errorf("%w: header %s: unknown reason %q (want turn, pause, migrate, import, manual or fork)", errBadRequest, wire.HdrReason, req.Reason))
	}
	if s := h.Get(wire.HdrExpectedVersion); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return refuse(fmt.Errorf("%w: header %s: %q is not a version number", errBadRequest, wire.HdrExpectedVersion, s))
		}
		req.Expected = &n
	}
	if s := h.Get(wire.HdrBaseVersion); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return refuse(fmt.Errorf("%w: header %s: %q is not a version number", errBadRequest, wire.HdrBaseVersion, s))
		}
		req.Base = &n
	}
	if s := h.Get(wire.HdrForkOf); s != "" {
		ref, err := wire.ParseForkRef(s)
		if err != nil {
			return refuse(fmt.Errorf("%w: header %s: %v", errBadRequest, wire.HdrForkOf, err))
		}
		req.ForkOf = &ref
	}
	if s := h.Get(wire.HdrEpoch); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			return refuse(fmt.Errorf("%w: header %s: %q is not a lease epoch", errBadRequest, wire.HdrEpoch, s))
		}
		req.Epoch = n
	}
	if s := h.Get(wire.HdrImportVersion); s != "" {
		imp, err := importHeaders(h, req.Now)
		if err != nil {
			return refuse(err)
		}
		req.Import = imp
	}
	if s := h.Get(wire.HdrFormat); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return refuse(fmt.Errorf("%w: header %s: %q is not a number", errBadRequest, wire.HdrFormat, s))
		}
		if err := codec.CheckFormatVersion(n); err != nil {
			return refuse(err)
		}
	}
	enc := h.Get(wire.HdrEncoding)
	if enc != "" && enc != wire.EncodingIdentity && enc != wire.EncodingZstd {
		return refuse(fmt.Errorf("%w: header %s: unknown encoding %q (want identity or zstd)", errBadRequest, wire.HdrEncoding, enc))
	}
	var body io.Reader = bytes.NewReader(msg.Data())
	sizeHint := int64(len(msg.Data()))
	var cr *chunkReader
	chunks := 0
	if s := h.Get(wire.HdrChunks); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return refuse(fmt.Errorf("%w: header %s: %q is not a positive count", errBadRequest, wire.HdrChunks, s))
		}
		// The pieces are read one at a time as they are decoded: a large save is never held
		// both compressed and whole.
		cr = &chunkReader{ctx: ctx, in: in, subj: wire.ChunkSubject(key.Namespace, saveID), n: n}
		if err := cr.fetch(); err != nil {
			if errors.Is(err, errBadRequest) {
				return refuse(err)
			}
			return wire.SaveResult{}, 0, err
		}
		body, sizeHint, chunks = cr, int64(len(cr.cur))*int64(n), n
	}
	if enc == wire.EncodingZstd {
		// The frame's declared size is the client's word: believe it only up to a ratio no real
		// conversation exceeds, so a tiny hostile frame cannot make us allocate the limit.
		declared := codec.FrameContentSize(msg.Data())
		if cr != nil {
			declared = codec.FrameContentSize(cr.cur)
		}
		sizeHint = min(declared, maxRatio*sizeHint)
	}
	if sizeHint >= largeBytes {
		eager.begin() // see eagergc.go
		defer eager.end()
	}
	var payload []byte
	var err error
	if enc == wire.EncodingZstd {
		payload, err = codec.DecompressZstdFrom(body, sizeHint, in.maxBytes)
	} else if cr != nil {
		payload, err = codec.ReadLimited(body, sizeHint, in.maxBytes)
	} else {
		payload = msg.Data() // one message, as sent: nothing to copy
	}
	if cr != nil && cr.err != nil {
		err = cr.err // what went wrong is the chunks, not the decoding
	}
	if err != nil {
		if errors.Is(err, errBadRequest) || errors.Is(err, codec.ErrTooLarge) || errors.Is(err, codec.ErrMalformed) {
			return refuse(err)
		}
		return wire.SaveResult{}, 0, err
	}
	req.Payload, req.Limits = payload, codec.Limits{MaxBytes: in.maxBytes}
	saved, err := snapshot.Save(ctx, in.store, req)
	var ce *snapshot.ConflictError
	var ve *codec.ValidationError
	switch {
	case errors.As(err, &ce), errors.As(err, &ve), errors.Is(err, snapshot.ErrBadRequest), errors.Is(err, snapshot.ErrCorrupt),
		errors.Is(err, snapshot.ErrLeased), errors.Is(err, snapshot.ErrFenced), errors.Is(err, snapshot.ErrMoved), errors.Is(err, snapshot.ErrHashMismatch):
		return refuse(err)
	case err != nil:
		return wire.SaveResult{}, 0, err
	}
	if !saved.Duplicate && snapshot.NeedsCompaction(saved.Head, false) {
		in.compactor.due(key)
	}
	in.compactor.touched(key)
	return wire.SaveResult{OK: true, Duplicate: saved.Duplicate, Version: &saved.Head.Version}, chunks, nil
}

// importHeaders reads the headers of a save that copies a version from elsewhere.
func importHeaders(h nats.Header, now time.Time) (*snapshot.Import, error) {
	n, err := strconv.ParseUint(h.Get(wire.HdrImportVersion), 10, 64)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("%w: header %s: %q is not a version number", errBadRequest, wire.HdrImportVersion, h.Get(wire.HdrImportVersion))
	}
	created, err := time.Parse(time.RFC3339Nano, h.Get(wire.HdrImportCreated))
	if err != nil {
		return nil, fmt.Errorf("%w: header %s: %q is not an RFC 3339 time", errBadRequest, wire.HdrImportCreated, h.Get(wire.HdrImportCreated))
	}
	hash := h.Get(wire.HdrHash)
	if !strings.HasPrefix(hash, "sha256:") || len(hash) != len("sha256:")+64 {
		return nil, fmt.Errorf("%w: header %s: %q is not a sha256:<hex> hash (an import must say what it copies)", errBadRequest, wire.HdrHash, hash)
	}
	via := h.Get(wire.HdrImportVia)
	if via != wire.ReasonMigrate && via != wire.ReasonImport {
		return nil, fmt.Errorf("%w: header %s: %q (want migrate or import)", errBadRequest, wire.HdrImportVia, via)
	}
	return &snapshot.Import{Version: n, Created: created, Hash: hash,
		Origin: wire.Origin{Via: via, Source: h.Get(wire.HdrImportSource), At: now.UTC()}}, nil
}

// chunkReader reads the n pieces of a large save from CP_CHUNKS, in order, one at a time.
type chunkReader struct {
	ctx  context.Context
	in   *ingester
	subj string
	n    int
	i    int    // pieces fetched
	seq  uint64 // where to look for the next one
	cur  []byte // the unread rest of the current piece
	err  error  // the first failure, kept so the caller can tell it from a decoding error
}

// fetch reads the next piece into cur.
func (c *chunkReader) fetch() error {
	m, err := c.in.st.read.next(c.ctx, c.in.st.chunks, max(c.seq, 1), c.subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		err = fmt.Errorf("%w: chunk %d of %d missing on %s (publish every chunk, and wait for its ack, before the save)", errBadRequest, c.i, c.n, c.subj)
	} else if err == nil && m.Header.Get(wire.HdrChunk) != strconv.Itoa(c.i) {
		err = fmt.Errorf("%w: chunk %d of %d on %s carries %s %q", errBadRequest, c.i, c.n, c.subj, wire.HdrChunk, m.Header.Get(wire.HdrChunk))
	}
	if err != nil {
		c.err = err
		return err
	}
	c.cur, c.seq = m.Data, m.Sequence+1
	c.i++
	return nil
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if c.i == c.n {
			return 0, io.EOF
		}
		if err := c.fetch(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// resultAttempt bounds one publish of a result, and resultRetryWait is the pause between attempts.
// A publish to the leader of CP_RESULTS that just died is never answered, and until a successor is
// elected (seconds after a crash) nobody answers at all; retrying here, at once, puts the outcome
// on the stream moments after the election. (Going through a redelivery instead would wait out a
// delay and then read the same dead leader again.)
const (
	resultAttempt   = time.Second
	resultRetryWait = 100 * time.Millisecond
)

// publishResult stores res on CP_RESULTS, retrying until it is stored or ctx ends. Every attempt
// also reaches a client listening on the result's subject, stored or not.
func (in *ingester) publishResult(ctx context.Context, res wire.SaveResult) error {
	data, err := json.Marshal(res)
	if err != nil {
		return err
	}
	subject := wire.ResultSubject(res.Key.Namespace, res.SaveID)
	for {
		actx, cancel := context.WithTimeout(ctx, resultAttempt)
		_, err = in.js.Publish(actx, subject, data)
		cancel()
		if err == nil || !retry(ctx, resultRetryWait) {
			return err
		}
	}
}

// retry waits d and reports whether ctx still allows another attempt.
func retry(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ack acknowledges a settled save, retrying until JetStream confirms it or ctx ends: an ack sent
// to a consumer leader that just died is lost, and the save would be delivered again after ackWait
// and settled a second time (as a duplicate).
func (in *ingester) ack(ctx context.Context, msg jetstream.Msg) error {
	for {
		actx, cancel := context.WithTimeout(ctx, resultAttempt)
		err := msg.DoubleAck(actx)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) || !retry(ctx, resultRetryWait) {
			return err
		}
	}
}

func (in *ingester) observe(res wire.SaveResult, start time.Time) {
	in.m.SaveSeconds.Observe(in.now().Sub(start).Seconds())
	switch {
	case res.Error != nil:
		in.m.Saves.WithLabelValues(res.Error.Code).Inc()
		in.log.Info("save refused", "session", res.Key, "save", res.SaveID, "code", res.Error.Code, "err", res.Error.Message)
	case res.Duplicate:
		in.m.Saves.WithLabelValues("duplicate").Inc()
	default:
		in.m.Saves.WithLabelValues("ok").Inc()
		in.m.RawBytes.Add(float64(res.Version.RawBytes))
		in.m.StoredBytes.Add(float64(res.Version.StoredBytes))
		in.log.Debug("saved", "session", res.Key, "version", res.Version.Version, "bytes", res.Version.RawBytes)
	}
}
