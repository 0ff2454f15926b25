// Package ingest settles saves: those queued on CP_INGEST by agents that found no daemon
// (ingest.go: the durable consumer, its lanes, large saves' chunks, outcomes on CP_RESULTS) and
// those sent as requests on cp.save... (saverequest.go), both through the same settle, within one
// budget of bytes held at once (ingestbudget.go).
package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/pieces"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/transfer/housekeeping"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Ingester takes saves off CP_INGEST, turns each into a version (or a refusal) and publishes the
// outcome on CP_RESULTS. A save leaves the work queue only after its outcome is published, so a
// crash at any point means it is delivered again; the save id makes the second pass a no-op.
type Ingester struct {
	js       jetstream.JetStream
	st       *edge.Streams
	engine   *engine.Engine
	maxBytes int64
	// imagePaths is the policy for images that name local files (codec.ImagePaths).
	imagePaths codec.ImagePaths
	log        *slog.Logger
	m          *metrics.Metrics
	now        func() time.Time
	// packer packs the sessions whose saves say their entries are due (housekeeping/pack.go).
	packer *housekeeping.Packer
	// budget bounds the bytes of the saves being settled (ingestbudget.go).
	budget *Budget
	// requests notices namespaces saving off the stream while requests work (requestwatch.go).
	requests requestWatch

	lanes []chan jetstream.Msg
	wg    sync.WaitGroup
	ctx   context.Context // cancelled only when shutdown must stop waiting on storage
	stop  context.CancelFunc

	mu       sync.Mutex
	cc       jetstream.ConsumeContext // replaced when the consumer is recreated (internal/transfer/health.go)
	stopping bool                     // shutdown began: no new consume
}

// Config is what an Ingester works with.
type Config struct {
	JS         jetstream.JetStream
	Streams    *edge.Streams
	Engine     *engine.Engine
	MaxBytes   int64            // largest conversation accepted (canonical JSON bytes)
	ImagePaths codec.ImagePaths // what a save does with images naming local files
	Logger     *slog.Logger
	Metrics    *metrics.Metrics
	Packer     *housekeeping.Packer // told which sessions are due to be packed
	Budget     *Budget              // bounds the bytes of the saves being settled
}

// New is an Ingester of cfg; Start starts it.
func New(cfg Config) *Ingester {
	return &Ingester{js: cfg.JS, st: cfg.Streams, engine: cfg.Engine, maxBytes: cfg.MaxBytes, imagePaths: cfg.ImagePaths,
		log: cfg.Logger, m: cfg.Metrics, now: time.Now, packer: cfg.Packer, budget: cfg.Budget}
}

// ackWait is how soon a save taken by a daemon that died is offered to another. Reads of the session
// wait for it meanwhile, so it is short; saves that take longer keep their claim with heartbeats.
const ackWait = 10 * time.Second

// maxAttempts bounds redeliveries of a save that keeps failing on storage errors. After that its
// refusal (code unavailable) is published, so the writer learns of it: never a silent drop.
const maxAttempts = 20

func (in *Ingester) Start(ctx context.Context, lanes int) error {
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
	if err := in.Consume(ctx); err != nil {
		for _, c := range in.lanes {
			close(c)
		}
		in.wg.Wait()
		return err
	}
	return nil
}

// Consume creates the durable consumer if it is missing and starts taking saves from it. The
// health monitor runs it again when the consumer stops delivering (deleted by an operator, say).
func (in *Ingester) Consume(ctx context.Context) error {
	cons, err := in.st.Ingest.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       edge.IngestConsumer,
		Description:   "checkpointd instances share this consumer",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxAckPending: 1024,
		FilterSubject: wire.EverySubject(wire.IngestSubjectPrefix),
	})
	if err != nil {
		return fmt.Errorf("ingest consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
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
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stopping {
		cc.Stop()
		return errors.New("ingest: shutting down")
	}
	in.cc = cc
	return nil
}

// Consuming returns the current consume, nil once shutdown began.
func (in *Ingester) Consuming() jetstream.ConsumeContext {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stopping {
		return nil
	}
	return in.cc
}

// Shutdown stops taking new saves and finishes the ones already taken. If ctx ends first, the
// saves still in flight are abandoned unacknowledged and are redelivered to the next daemon.
func (in *Ingester) Shutdown(ctx context.Context) {
	in.mu.Lock()
	in.stopping = true
	cc := in.cc
	in.mu.Unlock()
	if cc == nil {
		return
	}
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-ctx.Done():
		in.stop() // unblock workers waiting on storage, so the consume callback can return
		cc.Stop()
		<-cc.Closed()
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

func (in *Ingester) handle(msg jetstream.Msg) {
	start := in.now()
	in.m.ReceivedBytes.Add(float64(len(msg.Data())))
	meta, err := msg.Metadata()
	if err != nil {
		in.log.Error("ingest: message without metadata", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	key, saveID, err := attribute(wire.IngestSubjectPrefix, msg.Subject(), msg.Headers().Get(wire.HdrSaveID))
	if err != nil {
		// The save cannot be attributed to a session or a save id, but JetStream acknowledged it:
		// its refusal goes where the publisher can find it from its PubAck (docs/protocol.md §4.4).
		in.refuseUnattributed(msg, meta.Sequence.Stream, key.Namespace, err, start)
		return
	}
	if in.requests.ingested(key.Namespace, meta.Timestamp) {
		in.log.Warn("saves of this namespace come off the ingest stream while save requests work for other namespaces: "+
			"its writers get no responders on cp.save.<namespace>.>, so every save takes the slower path. Likeliest cause: "+
			"its tenant account was configured from a --print-nats-config of checkpointd before 0.4, without the cp.save import "+
			"(install the current printout; README, upgrade notes); or its writers use an SDK before 0.4, or WithIngestSaves. "+
			"Said once per namespace", "namespace", key.Namespace, "session", key, "save", saveID)
	}
	ctx, cancel := context.WithTimeout(in.ctx, 30*time.Second)
	defer cancel()
	go heartbeat(ctx, msg)

	res, chunks, err := in.settle(ctx, key, saveID, msg.Headers(), msg.Data(), pathIngest)
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
	if refused(res) {
		// Before the writer learns of the refusal: the save it sends again finds none of these.
		in.removeChunks(ctx, key, saveID, msg.Headers())
	}
	if err := in.publishResult(ctx, res); err != nil {
		in.log.Warn("ingest: publishing result failed, will retry", "session", key, "save", saveID, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if !refused(res) {
		in.removeChunks(ctx, key, saveID, msg.Headers())
	}
	if err := in.ack(ctx, msg); err != nil {
		// The outcome is stored; a redelivery finds the save id at the head and changes nothing.
		in.log.Warn("ingest: ack failed", "session", key, "save", saveID, "err", err)
	}
	in.observe(pathIngest, res, start)
	collectLargeSave(chunks)
}

// refused reports whether res is a refusal that settles the save (not busy or unavailable, after
// which the writer sends the same save again and its chunks are kept for it). Its chunks are
// removed before the writer is told, so that a save sent again under the same save id, with its
// chunks published anew, is not joined with the refused one's.
func refused(res wire.SaveResult) bool {
	return res.Error != nil && res.Error.Code != wire.CodeBusy && res.Error.Code != wire.CodeUnavailable
}

// removeChunks removes the chunks of a settled save (accepted or refused), if it had any.
func (in *Ingester) removeChunks(ctx context.Context, key wire.Key, saveID string, h nats.Header) {
	if h.Get(wire.HdrChunks) == "" {
		return
	}
	subj := wire.ChunkSubject(key.Namespace, saveID)
	if err := in.st.Chunks.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		in.log.Warn("ingest: could not remove settled chunks; they expire with the stream's max age", "subject", subj, "err", err)
	}
}

// collectLargeSave runs the collector after a save of many chunks: its buffers (tens of MiB) are
// garbage now, and are collected before the next large allocation (its restore, typically)
// instead of letting the heap grow to twice its size.
func collectLargeSave(chunks int) {
	if chunks >= largeSaveChunks {
		runtime.GC()
	}
}

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

// attribute names the session and the save id of a save on a subject starting with prefix
// (wire.IngestSubjectPrefix or wire.SaveSubjectPrefix). Every save must carry its own valid
// Cp-Save-Id: the daemon never makes one up, so no id it uses can be a client's.
func attribute(prefix, subject, saveID string) (wire.Key, string, error) {
	key, err := wire.ParseToken(strings.TrimPrefix(subject, prefix))
	if err != nil {
		if toks := strings.Split(subject, "."); len(toks) > 2 {
			key.Namespace, _ = wire.DecodeID(toks[2]) // for the refusal, when it can be read
		}
		return key, "", fmt.Errorf("%w: subject %q is not %s<namespace>.<session>.<agent> with encoded ids (docs/protocol.md §2): %v", edge.ErrBadRequest, subject, prefix, err)
	}
	if err := checkSaveID(saveID); err != nil {
		return key, "", err
	}
	return key, saveID, nil
}

// checkSaveID refuses a save id that is missing or not a valid id (it names the result subject).
func checkSaveID(saveID string) error {
	if saveID == "" {
		return fmt.Errorf("%w: header %s: missing; every save needs an id of its own (1 to %d bytes of UTF-8), which names its result subject and makes retries safe", edge.ErrBadRequest, wire.HdrSaveID, wire.MaxIDBytes)
	}
	if err := wire.ValidateID(saveID); err != nil {
		return fmt.Errorf("%w: header %s: %v", edge.ErrBadRequest, wire.HdrSaveID, err)
	}
	return nil
}

// refuseUnattributed answers a save that names no usable session or save id. Its result goes to
// wire.UnattributedResultSubject: the subject's namespace token as published and the stream
// sequence from the PubAck, both of which the publisher knows.
func (in *Ingester) refuseUnattributed(msg jetstream.Msg, seq uint64, ns string, cause error, start time.Time) {
	nsToken := "_" // never used: a subject matching cp.ingest.> has a third token
	if toks := strings.Split(msg.Subject(), "."); len(toks) > 2 {
		nsToken = toks[2]
	}
	res := wire.SaveResult{Key: wire.Key{Namespace: ns}, Seq: seq, Error: edge.ToWireError(cause)}
	ctx, cancel := edge.OpContext(in.ctx)
	defer cancel()
	if err := in.publishResultOn(ctx, wire.UnattributedResultSubject(nsToken, seq), res); err != nil {
		in.log.Warn("ingest: publishing a refusal failed, will retry", "subject", msg.Subject(), "seq", seq, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if err := in.ack(ctx, msg); err != nil {
		in.log.Warn("ingest: ack failed", "subject", msg.Subject(), "seq", seq, "err", err)
	}
	in.observe(pathIngest, res, start)
}

// prior returns the outcome of a save id that an earlier delivery of the same save already stored.
// JetStream drops duplicate publishes for two minutes; this keeps a replayed save from becoming a
// new version for as long as results are kept. A result on CP_RESULTS is only a hint of which
// version to look at: anyone able to publish on a result subject could have written it, so the
// duplicate is decided by the version record in storage, which only daemons write.
func (in *Ingester) prior(ctx context.Context, key wire.Key, saveID string) (*wire.Version, engine.Record, error) {
	stored, err := in.storedResult(ctx, key, saveID)
	if err != nil || stored == nil {
		return nil, engine.Record{}, err
	}
	return in.versionNamed(ctx, key, saveID, *stored)
}

// storedResult is the result kept on CP_RESULTS for key's save id: nil if there is none, or if
// what is there is not a result of that save (anyone able to publish there could have written it,
// so it is only ever a hint, or a refusal repeated to the writer of that save: storedRefusal).
func (in *Ingester) storedResult(ctx context.Context, key wire.Key, saveID string) (*wire.SaveResult, error) {
	results, err := in.st.Results(ctx, false)
	if err != nil || results == nil { // nil: no result was ever stored
		return nil, err
	}
	m, err := in.st.Read.Last(ctx, results, wire.ResultSubject(key.Namespace, saveID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var res wire.SaveResult
	if json.Unmarshal(m.Data, &res) != nil || res.Key != key || res.SaveID != saveID {
		return nil, nil
	}
	return &res, nil
}

// versionNamed is the version a stored result of saveID names, read from storage: nil if it names
// none, or one that is gone or that another save id made.
func (in *Ingester) versionNamed(ctx context.Context, key wire.Key, saveID string, res wire.SaveResult) (*wire.Version, engine.Record, error) {
	var made uint64
	switch {
	case res.OK && res.Version != nil:
		made = res.Version.Version
	case res.Error != nil && res.Error.Code == wire.CodeSaveIDReused && res.Error.Version != nil:
		// A later save refused for reusing the save id replaced the result kept on the subject;
		// it names the version the save id made, so the save itself is still recognised.
		made = *res.Error.Version
	default:
		return nil, engine.Record{}, nil
	}
	rec, err := in.engine.Version(ctx, edge.KeyOf(key), made)
	if errors.Is(err, engine.ErrNotFound) {
		return nil, engine.Record{}, nil // pruned since, or never there: settle the save as if new
	}
	if err != nil {
		return nil, engine.Record{}, err
	}
	v := edge.VersionOf(rec)
	if v.SaveID != saveID {
		in.log.Warn("ingest: a stored result names a version this save did not make; ignoring it",
			"session", key, "save", saveID, "version", v.Version)
		return nil, engine.Record{}, nil
	}
	return &v, rec, nil
}

// settle decides the outcome of one save, whichever way it came (path: a message off CP_INGEST,
// or a request on cp.save.>): its headers h and its body data as received. A returned error is
// transient (storage); refusals are part of the result. The int is the save's chunk count if its
// chunks were read (also when it was refused for what they hold), else 0: a chunked save's refusal
// with chunks read is one its writer cannot get again from a resend (the chunks are removed with
// it), so a save request's is stored (SaveRequests.storeChunkedRefusal).
//
// A save off the stream first looks for the outcome an earlier delivery stored on CP_RESULTS
// (prior): a redelivery must be its duplicate for as long as results are kept, beyond what the
// engine recognises by itself. A request skips that round trip: its results are never stored
// there, and the engine recognises a save id among the session's newest versions (savedBefore,
// savedAfter; docs/protocol.md §4.3 says how far back).
func (in *Ingester) settle(ctx context.Context, key wire.Key, saveID string, h nats.Header, data []byte, path string) (wire.SaveResult, int, error) {
	refuse := func(err error) (wire.SaveResult, int, error) {
		return wire.SaveResult{Error: edge.ToWireError(err)}, 0, nil
	}
	hs, err := parseSaveHeaders(h, key, saveID, in.now(), in.maxBytes)
	if err != nil {
		return refuse(err)
	}
	mem := in.budget.begin(ctx) // every buffer of the body is reserved before it is made
	defer mem.end()
	payload, read, err := in.readBody(ctx, hs, data, mem)
	if err != nil {
		if isRefusal(err) {
			// A retry of a chunked save already settled finds its chunks removed: it is the
			// duplicate of what it made.
			if hs.chunks > 0 {
				v, refusal, perr := in.settledBefore(ctx, key, saveID)
				if perr != nil || v != nil {
					return wire.SaveResult{OK: v != nil, Duplicate: true, Version: v, Unverified: chunksGone}, 0, perr
				}
				// A resend of a chunked save refused before (its chunks removed with the
				// refusal) gets that refusal again: the same answer to the same save.
				if refusal != nil && read == 0 {
					return *refusal, 0, nil
				}
			}
			res, _, _ := refuse(err)
			return res, chunksRead(hs, read), nil
		}
		return wire.SaveResult{}, 0, err
	}
	// What the daemon read, hashed, goes back in the result: the writer compares it with what it
	// sent (end-to-end integrity of the transfer; a forged result cannot know it). The hash is a
	// pass over the whole body, so a large one is hashed beside the engine's work, not before it.
	received := wire.HashBeside(payload)
	req := in.saveRequest(hs, payload, mem)
	var saved engine.Saved
	if path == pathIngest {
		var v *wire.Version
		v, saved.Record, err = in.prior(ctx, key, saveID)
		if err == nil && v != nil {
			// A redelivery is the save again only with the same conversation (the engine
			// checks the same for the save ids it finds itself).
			saved.Unverified, err = in.engine.CheckRepeat(ctx, req, saved.Record)
		}
		if err == nil && v != nil {
			return wire.SaveResult{OK: true, Duplicate: true, Version: v, Received: received(), Unverified: saved.Unverified}, hs.chunks, nil
		}
	}
	if err == nil {
		saved, err = in.engine.Save(ctx, req)
	}
	res, err := in.outcome(req.Key, saved, err, received)
	if err != nil {
		return wire.SaveResult{}, 0, err
	}
	return res, hs.chunks, nil
}

// saveRequest is the engine's request for a save whose headers hs and body payload were read.
func (in *Ingester) saveRequest(hs saveHeaders, payload []byte, mem *reservation) engine.SaveRequest {
	req := hs.req
	req.Payload, req.Limits = payload, codec.Limits{MaxBytes: in.maxBytes, ImagePaths: in.imagePaths, Dialect: hs.dialect}
	// A repeat of an append reads its base version: within the budget, like the body, but without
	// waiting for it (the engine reads it with the session locked).
	req.Memory = mem.withoutWaiting()
	return req
}

// outcome is the result of a save the engine settled as saved and err: a version, or a refusal;
// or err itself for storage trouble (nothing decided: the writer sends the save again). received
// is the hash of the body as read; it is waited for in every case, so that the hashing is done
// before the body's buffers go back.
func (in *Ingester) outcome(key engine.Key, saved engine.Saved, err error, received func() string) (wire.SaveResult, error) {
	switch {
	case edge.IsStorageRefusal(err) || isBusy(err): // busy: no budget to read a repeat's base version
		return wire.SaveResult{Error: edge.ToWireError(err), Received: received()}, nil
	case err != nil:
		received()
		return wire.SaveResult{}, err
	}
	if saved.PackDue {
		in.packer.Due(key) // packed after the save is answered, off its latency
	}
	v := edge.VersionOf(saved.Record)
	return wire.SaveResult{OK: true, Duplicate: saved.Duplicate, Version: &v, Received: received(), Unverified: saved.Unverified}, nil
}

// settledBefore finds the outcome of a chunked save whose chunks are gone (a rare refusal path, so
// every place is looked in). First the version it made: by its stored result (a save off the
// stream, or first sent there and retried as a request: prior), or among the session's newest
// versions (a save sent as a request, whose result is not stored, sent again after the first send
// was stored and its chunks removed: the SDK sends a request again when the reply does not come in
// time, and another daemon of the queue group may take it). Failing that, the refusal stored for
// it (refused: not busy or unavailable, which keep the chunks): a chunked save's refusal is stored
// on CP_RESULTS whichever path it came by, before its chunks are removed, so the same save sent
// again without its chunks (its writer lost only the reply) is answered the same. A stored
// refusal is only repeated to the save id's writer: nothing is stored or changed on its account.
// All nil if none of them has it.
func (in *Ingester) settledBefore(ctx context.Context, key wire.Key, saveID string) (*wire.Version, *wire.SaveResult, error) {
	stored, err := in.storedResult(ctx, key, saveID)
	if err != nil {
		return nil, nil, err
	}
	if stored != nil {
		if v, _, err := in.versionNamed(ctx, key, saveID, *stored); err != nil || v != nil {
			return v, nil, err
		}
	}
	rec, ok, err := in.engine.SavedBy(ctx, edge.KeyOf(key), saveID)
	if err != nil {
		return nil, nil, err
	}
	if ok {
		v := edge.VersionOf(rec)
		return &v, nil, nil
	}
	if stored != nil && refused(*stored) {
		return nil, stored, nil
	}
	return nil, nil, nil
}

// chunksGone is the Unverified of a chunked save's repeat whose chunks are gone: the daemon
// removes a save's chunks once it is settled, so a retry that sent them again under the same
// message ids (dropped by JetStream as repeats) has no body left to compare.
const chunksGone = "the save's chunks were removed when its save id's version was stored (a retry's chunks sent again under the same message ids are dropped as repeats): its body was not compared with that version"

// isRefusal tells a body that cannot be read as sent (a refusal, part of the result) from storage
// trouble (retried).
func isRefusal(err error) bool {
	var we *wire.Error // busy, or a header out of range
	return errors.As(err, &we) || errors.Is(err, edge.ErrBadRequest) || errors.Is(err, codec.ErrTooLarge) || errors.Is(err, codec.ErrMalformed)
}

// isBusy reports whether err is the ingest budget's refusal (busySave).
func isBusy(err error) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == wire.CodeBusy
}

// saveHeaders is what the headers of a save say, checked.
type saveHeaders struct {
	req      engine.SaveRequest // all but Payload and Limits
	encoding string             // wire.EncodingIdentity or wire.EncodingZstd
	chunks   int                // the body is in this many chunks; 0: in the message
	dialect  string             // the conversation's shape; "" is native
}

// parseSaveHeaders reads the headers of a save. It does no I/O, so it is fuzzed on its own
// (FuzzIngestHeaders). Every integer is range-checked: versions and epochs within wire.MaxVersion,
// a chunk count within maxBytes (a chunk holds at least one byte). Every error is a bad_request
// naming the header, or unknown_format for a Cp-Format this daemon does not know.
func parseSaveHeaders(h nats.Header, key wire.Key, saveID string, now time.Time, maxBytes int64) (saveHeaders, error) {
	hs := saveHeaders{encoding: wire.EncodingIdentity,
		req: engine.SaveRequest{Key: edge.KeyOf(key), SaveID: saveID, Writer: h.Get(wire.HdrWriter), Reason: h.Get(wire.HdrReason), Now: now}}
	for _, name := range []string{wire.HdrWriter, wire.HdrImportSource} {
		if n := len(h.Get(name)); n > wire.MaxTextHeaderBytes {
			return hs, fmt.Errorf("%w: header %s: %d bytes, at most %d (it is recorded in the version)", edge.ErrBadRequest, name, n, wire.MaxTextHeaderBytes)
		}
	}
	if r := hs.req.Reason; r != "" && !wire.ValidReason(r) {
		return hs, fmt.Errorf("%w: header %s: unknown reason %q (want turn, pause, migrate, import, manual or fork)", edge.ErrBadRequest, wire.HdrReason, r)
	}
	version := func(name string, lo uint64) (*uint64, error) {
		s, sent, err := numericHeader(h, name)
		if err != nil || !sent {
			return nil, err
		}
		n, err := wire.ParseHeaderCount(name, s, lo, wire.MaxVersion)
		return &n, err
	}
	var err error
	if hs.req.Expected, err = version(wire.HdrExpectedVersion, 0); err != nil {
		return hs, err
	}
	if hs.req.Base, err = version(wire.HdrBaseVersion, 0); err != nil {
		return hs, err
	}
	if epoch, err := version(wire.HdrEpoch, 1); err != nil {
		return hs, err
	} else if epoch != nil {
		hs.req.Epoch = *epoch
	}
	if s, sent, err := singleHeader(h, wire.HdrForkOf, "a fork reference <session>.<agent>.<version>"); err != nil {
		return hs, err
	} else if sent {
		ref, err := wire.ParseForkRef(s)
		if err != nil {
			return hs, fmt.Errorf("%w: header %s: %v", edge.ErrBadRequest, wire.HdrForkOf, err)
		}
		hs.req.ForkOf = edge.ForkRefOf(&ref)
	}
	if _, sent, err := numericHeader(h, wire.HdrImportVersion); err != nil {
		return hs, err
	} else if sent {
		if hs.req.Import, err = importHeaders(h, now); err != nil {
			return hs, err
		}
	}
	if s, sent, err := numericHeader(h, wire.HdrFormat); err != nil {
		return hs, err
	} else if sent {
		n, err := wire.ParseHeaderCount(wire.HdrFormat, s, 0, math.MaxInt32)
		if err != nil {
			return hs, err
		}
		if err := codec.CheckFormatVersion(int(n)); err != nil {
			var ve *codec.ValidationError
			if errors.As(err, &ve) { // say where the format came from
				named := *ve
				named.Detail = "header " + wire.HdrFormat + ": " + ve.Detail
				err = &named
			}
			return hs, err
		}
	}
	if hs.dialect = h.Get(wire.HdrDialect); codec.CheckDialect(hs.dialect) != nil {
		return hs, fmt.Errorf("%w: header %s: unknown dialect %q (known: %s)", edge.ErrBadRequest, wire.HdrDialect, hs.dialect, strings.Join(codec.Dialects(), ", "))
	}
	switch enc := h.Get(wire.HdrEncoding); enc {
	case "", wire.EncodingIdentity:
	case wire.EncodingZstd:
		hs.encoding = enc
	default:
		return hs, fmt.Errorf("%w: header %s: unknown encoding %q (want identity or zstd)", edge.ErrBadRequest, wire.HdrEncoding, enc)
	}
	if s, sent, err := numericHeader(h, wire.HdrChunks); err != nil {
		return hs, err
	} else if sent {
		// More chunks than the size limit has bytes cannot be a real save, whatever their size.
		n, err := wire.ParseHeaderCount(wire.HdrChunks, s, 1, uint64(maxBytes))
		if err != nil {
			return hs, err
		}
		hs.chunks = int(n)
	}
	return hs, nil
}

// numericHeader returns the value of header name, whether the save sent it at all, and a
// bad_request if it was sent empty or more than once: an empty number is not 0, and of two values
// the daemon would pick one the sender may not have meant (every number of a save is a plain
// decimal, sent once: docs/protocol.md §4.1).
func numericHeader(h nats.Header, name string) (string, bool, error) {
	return singleHeader(h, name, "a plain decimal integer")
}

// singleHeader is numericHeader for a header whose value is want (for the error): Cp-Fork-Of, which
// carries a version too, sent twice or empty was taken as its first value or as not sent.
func singleHeader(h nats.Header, name, want string) (string, bool, error) {
	values, sent := h[name]
	switch {
	case !sent:
		return "", false, nil
	case len(values) != 1:
		return "", true, fmt.Errorf("%w: header %s: sent %d times, at most once", edge.ErrBadRequest, name, len(values))
	case values[0] == "":
		return "", true, fmt.Errorf("%w: header %s: empty, want %s", edge.ErrBadRequest, name, want)
	}
	return values[0], true, nil
}

// importHeaders reads the headers of a save that copies a version from elsewhere.
func importHeaders(h nats.Header, now time.Time) (*engine.Import, error) {
	n, err := wire.ParseHeaderCount(wire.HdrImportVersion, h.Get(wire.HdrImportVersion), 1, wire.MaxVersion)
	if err != nil {
		return nil, err
	}
	created, err := time.Parse(time.RFC3339Nano, h.Get(wire.HdrImportCreated))
	if err != nil {
		return nil, fmt.Errorf("%w: header %s: %q is not an RFC 3339 time", edge.ErrBadRequest, wire.HdrImportCreated, h.Get(wire.HdrImportCreated))
	}
	hash := h.Get(wire.HdrHash)
	if !strings.HasPrefix(hash, "sha256:") || len(hash) != len("sha256:")+64 {
		return nil, fmt.Errorf("%w: header %s: %q is not a sha256:<hex> hash (an import must say what it copies)", edge.ErrBadRequest, wire.HdrHash, hash)
	}
	via := h.Get(wire.HdrImportVia)
	if via != wire.ReasonMigrate && via != wire.ReasonImport {
		return nil, fmt.Errorf("%w: header %s: %q (want migrate or import)", edge.ErrBadRequest, wire.HdrImportVia, via)
	}
	return &engine.Import{Version: n, Created: created, Hash: hash,
		Origin: edge.OriginOf(wire.Origin{Via: via, Source: h.Get(wire.HdrImportSource), At: now.UTC()})}, nil
}

// readBody returns the body of a save, decoded: the message's own bytes as sent, or its chunks read
// one at a time and concatenated (a large save is never held both compressed and whole), then
// decompressed if zstd. Every buffer is reserved with mem first. The int64 is the bytes of chunks
// read (0 for a body in the message).
func (in *Ingester) readBody(ctx context.Context, hs saveHeaders, data []byte, mem *reservation) ([]byte, int64, error) {
	if hs.chunks == 0 {
		if err := mem.Reserve(int64(len(data))); err != nil { // received: counted while the save lasts
			return nil, 0, err
		}
		if hs.encoding == wire.EncodingIdentity {
			return data, 0, nil // nothing to copy
		}
		// Held whole: its frames (the SDK cuts a large body in several) are decoded at once.
		body, err := codec.DecompressFrames(data, in.maxBytes, mem)
		collectBlocks(body)
		return body, 0, err
	}
	subj := wire.ChunkSubject(hs.req.Key.Namespace, hs.req.SaveID)
	body, received, err := readChunks(subj, hs.chunks, in.chunkPieces(ctx, subj), hs.encoding, in.maxBytes, mem)
	in.m.ReceivedBytes.Add(float64(received))
	collectBlocks(body)
	return body, received, err
}

// chunksRead is the chunk count settle returns for a save refused after its body was read: the
// save's, if any of its chunks was there (read bytes), else 0.
func chunksRead(hs saveHeaders, read int64) int {
	if read == 0 {
		return 0
	}
	return hs.chunks
}

// collectBlocks runs the collector after a large body was read: the blocks it was read into are
// garbage as large as the body, and the save is about to make a canonical copy of it; collected
// now, they never coexist with that copy.
func collectBlocks(body []byte) {
	if len(body) >= housekeeping.LargeBytes {
		runtime.GC()
	}
}

// decodeBody reads a body to its end, decompressing it if enc is zstd, refusing more than maxBytes
// of output. head is the start of the body as received (codec.DecompressBody reads the frame header
// in it). It knows nothing of NATS (FuzzChunkAssembly runs it on pieces in memory).
func decodeBody(r io.Reader, enc string, head []byte, maxBytes int64, mem codec.Growth) ([]byte, error) {
	if enc == wire.EncodingZstd {
		return codec.DecompressBody(r, head, maxBytes, mem)
	}
	return codec.ReadBody(r, maxBytes, mem)
}

// chunkPieces returns the chunks of a save on CP_CHUNKS (subject subj), in stream order, one per
// call: each one's number (Cp-Chunk) and bytes, then io.EOF when there is none left. Storage
// trouble is returned as it is, to be retried.
func (in *Ingester) chunkPieces(ctx context.Context, subj string) func() (int64, []byte, error) {
	seq := uint64(1)
	return func() (int64, []byte, error) {
		m, err := in.st.Read.Next(ctx, in.st.Chunks, seq, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return 0, nil, io.EOF
		}
		if err != nil {
			return 0, nil, err
		}
		seq = m.Sequence + 1
		at, err := pieces.ParseNumber(wire.HdrChunk, m.Header.Get(wire.HdrChunk))
		return at, m.Data, err
	}
}

// readChunks reads the body of a save from its n chunks, which next returns in stream order (subj
// names them in errors), and decodes it as decodeBody does. The chunks are the pieces of
// docs/protocol.md §12, numbered by index, joined one at a time as they are decoded: only the
// current one is held (reserved with mem), a repeat of one already read is skipped, and a missing
// one is found when its turn comes, so a chunk count costs nothing until its chunks are there.
// They decode to at most maxBytes: compressed, that is at most maxBytes plus zstd's framing (under
// 0.01% for incompressible data), so chunks holding more than maxBytes plus 1/64 and 64 KiB are
// refused too_large, however they would decode. It returns the bytes of the chunks taken too. It
// knows nothing of NATS (FuzzChunkAssembly runs it on pieces in memory).
func readChunks(subj string, n int, next func() (int64, []byte, error), enc string, maxBytes int64, mem codec.Growth) ([]byte, int64, error) {
	j := pieces.NewJoiner(pieces.Config{By: pieces.ByIndex, Limit: maxBytes + maxBytes/64 + 64<<10, SkipRepeats: true, Budget: mem})
	if err := j.Expect(int64(n), ""); err != nil {
		return nil, 0, chunkError(subj, err)
	}
	r := pieces.NewReader(j, next)
	// The first chunk's frame header says the decoder's window and the body's size (decodeBody).
	if err := r.Fetch(); err != nil {
		return nil, j.Received(), chunkError(subj, err)
	}
	body, err := decodeBody(r, enc, r.Current(), maxBytes, mem)
	if r.Err() != nil {
		err = chunkError(subj, r.Err()) // what went wrong is the chunks (or the budget), not the decoding
	}
	return body, j.Received(), err
}

// chunkError is the refusal of a save whose chunks are not what it says: too_large past the
// limit, bad_request naming the piece otherwise. Any other error (storage, the memory budget) is
// returned as it is.
func chunkError(subj string, err error) error {
	var pe *pieces.Error
	switch {
	case !errors.As(err, &pe):
		return err
	case errors.Is(err, pieces.ErrTooLarge):
		return &codec.ValidationError{Err: codec.ErrTooLarge, Index: -1, Offset: -1, Detail: fmt.Sprintf("the chunks on %s: %v", subj, pe)}
	default:
		return fmt.Errorf("%w: the chunks on %s: %v (publish every chunk, in order, and wait for its ack, before the save)", edge.ErrBadRequest, subj, pe)
	}
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
func (in *Ingester) publishResult(ctx context.Context, res wire.SaveResult) error {
	return in.publishResultOn(ctx, wire.ResultSubject(res.Key.Namespace, res.SaveID), res)
}

// announceResult publishes res, the outcome of a save sent as a request, as data (its JSON, the
// bytes of the reply: encoded once) on its live subject cp.saved.<ns>.<saveid>, which no stream
// captures: watchers see it, nothing is stored. Its writer has it in the reply, and a retry of the
// request is de-duplicated by save id, so storing it on CP_RESULTS (about 1 KB per save, kept for
// the result TTL) would only cost disk writes.
func (in *Ingester) announceResult(res wire.SaveResult, data []byte) error {
	return in.js.Conn().Publish(wire.SavedSubject(res.Key.Namespace, res.SaveID), data)
}

func (in *Ingester) publishResultOn(ctx context.Context, subject string, res wire.SaveResult) error {
	data := encodeResult(res, replyRoom(in.js.Conn().MaxPayload())) // a refusal cut to fit (refusalroom.go)
	for {
		actx, cancel := context.WithTimeout(ctx, resultAttempt)
		// The first result a deployment stores makes CP_RESULTS (edge.EnsureStreams).
		_, err := in.st.Results(actx, true)
		if err == nil {
			_, err = in.js.Publish(actx, subject, data)
		}
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
func (in *Ingester) ack(ctx context.Context, msg jetstream.Msg) error {
	for {
		actx, cancel := context.WithTimeout(ctx, resultAttempt)
		err := msg.DoubleAck(actx)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) || !retry(ctx, resultRetryWait) {
			return err
		}
	}
}

// The ways a save reaches the daemon, as counted by saves_total{path}.
const (
	pathRequest = metrics.SavePathRequest // a request on cp.save.>, answered when settled
	pathIngest  = metrics.SavePathIngest  // a message off CP_INGEST, the fallback
)

func (in *Ingester) observe(path string, res wire.SaveResult, start time.Time) {
	in.m.SaveSeconds.Observe(in.now().Sub(start).Seconds())
	switch {
	case res.Error != nil:
		in.m.Saves.WithLabelValues(path, res.Error.Code).Inc()
		in.log.Info("save refused", "path", path, "session", res.Key, "save", res.SaveID, "code", res.Error.Code, "err", res.Error.Message)
	case res.Duplicate:
		in.m.Saves.WithLabelValues(path, "duplicate").Inc()
	default:
		in.m.Saves.WithLabelValues(path, "ok").Inc()
		in.m.RawBytes.Add(float64(res.Version.RawBytes))
		in.m.StoredBytes.Add(float64(res.Version.StoredBytes))
		in.log.Debug("saved", "session", res.Key, "version", res.Version.Version, "bytes", res.Version.RawBytes)
	}
}
