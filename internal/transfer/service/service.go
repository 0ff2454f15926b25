// Package service answers the read side of the protocol, and the operations beside saves, as a
// NATS micro service on cp.api.<namespace>.<op>: list and history (list.go), get and read with
// their bodies, compressed and cached (readbody.go, readrecord.go, cache.go), lease, seal and delete
// (lease.go), fork (fork.go) and prune. Every read first waits for the session's queued saves
// (read-your-writes), and every request is admitted within bounds (internal/transfer/admission).
package service

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/checkpointd/checkpointd/internal/buildinfo"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/pieces"
	"github.com/checkpointd/checkpointd/internal/transfer/admission"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/transfer/housekeeping"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Service answers the read side of the protocol as a nats.go micro Service, so `nats micro ls`,
// `$SRV.PING|INFO|STATS` and per-endpoint statistics come for free.
type Service struct {
	nc      *nats.Conn
	st      *edge.Streams
	engine  *engine.Engine
	cache   *byteCache
	log     *slog.Logger
	m       *metrics.Metrics
	timeout time.Duration
	semver  string
	svc     micro.Service
	policy  *housekeeping.LivePolicy
	purging sync.Mutex // held while acknowledged saves are purged from the queue (edge/reconcile.go)

	adm *admission.Controller // bounds the requests in progress, never by waiting (internal/transfer/admission)

	peeks   *peeks             // the ingest queue asked beside a read (queuepeek.go)
	notes   *edge.Notes        // what the streams stored, so that a read need not ask (edge/notes.go)
	workers *admission.Workers // the goroutines that run the admitted requests

	results resultCounts  // requests by operation and result, for the service's stats ($SRV.STATS)
	headers recordHeaders // the Cp-Version headers built (readrecord.go)
}

// resultCounts counts requests by operation and result (ok or an error code: a bounded set), as
// checkpointd_requests_total does, for the NATS service's stats.
type resultCounts struct {
	mu sync.Mutex
	n  map[string]map[string]uint64
}

func (r *resultCounts) add(op, result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]map[string]uint64{}
	}
	if r.n[op] == nil {
		r.n[op] = map[string]uint64{}
	}
	r.n[op][result]++
}

// EndpointResults is the data of an endpoint's service stats: its requests by result, and how
// many were refused (any result but ok), the figure that agrees with checkpointd_requests_total.
type EndpointResults struct {
	Refused  uint64            `json:"refused"`
	ByResult map[string]uint64 `json:"by_result"`
}

func (r *resultCounts) of(op string) EndpointResults {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := EndpointResults{ByResult: map[string]uint64{}}
	for result, n := range r.n[op] {
		out.ByResult[result] = n
		if result != "ok" {
			out.Refused += n
		}
	}
	return out
}

type reply struct {
	data []byte
	hdr  micro.Headers
}

type opHandler func(ctx context.Context, ns string, body []byte) (reply, error)

// Config is what a Service works with.
type Config struct {
	NC         *nats.Conn
	Streams    *edge.Streams
	Engine     *engine.Engine
	CacheBytes int64 // read cache size
	ReadBytes  int64 // bytes of replies being built and conversations being loaded (admission)
	Logger     *slog.Logger
	Metrics    *metrics.Metrics
	Timeout    time.Duration // upper bound on one request, including waiting for ingest
	Version    string        // reported by the service (semver)
	Policy     *housekeeping.LivePolicy
	Notes      *edge.Notes // what the streams republish: nil, every read asks (edge/notes.go)
}

// New is a Service of cfg; Start starts it.
func New(cfg Config) *Service {
	return &Service{nc: cfg.NC, st: cfg.Streams, engine: cfg.Engine, cache: newByteCache(cfg.CacheBytes), log: cfg.Logger,
		m: cfg.Metrics, timeout: cfg.Timeout, semver: cfg.Version, policy: cfg.Policy,
		adm: admission.New(cfg.ReadBytes, cfg.Metrics.ReadBytesInUse), peeks: &peeks{nc: cfg.NC}, notes: cfg.Notes, workers: admission.NewWorkers()}
}

// CacheStats are the read cache's figures: hits and misses so far, and the bytes it holds.
func (s *Service) CacheStats() (hits, misses uint64, bytes int64) { return s.cache.stats() }

// Start adds the service's endpoints to the NATS micro service (cp.api.<namespace>.<op>).
func (s *Service) Start() error {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        wire.ServiceName,
		Version:     s.semver,
		Description: "Durable, versioned checkpoints of agent conversations",
		QueueGroup:  wire.ServiceName,
		// version, commit, Go, protocol and storage formats: what `nats micro info` shows an operator.
		Metadata: buildinfo.Get().Metadata(),
		// The service's own num_errors counts only the requests refused before they are handed to
		// a goroutine (busy): micro counts an error only when the handler replied before returning.
		// Each endpoint's stats data gives the daemon's count of every result (endpointStats).
		StatsHandler: func(e *micro.Endpoint) any { return s.results.of(e.Name) },
	})
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	s.svc = svc
	// Scans cost more the more is stored; they get slots of their own (internal/transfer/admission).
	ops := []struct {
		name    string
		subject string
		class   admission.Class
		h       opHandler
	}{
		{wire.OpList, wire.APIOpSubjects(wire.OpList), admission.ClassScan, s.list},
		{wire.OpHistory, wire.APIOpSubjects(wire.OpHistory), admission.ClassScan, s.history},
		{wire.OpGet, wire.APIOpSubjects(wire.OpGet), admission.ClassPoint, s.get},
		{wire.OpRead, wire.APIOpSubjects(wire.OpRead), admission.ClassPoint, s.read},
		{wire.OpPrune, wire.APIOpSubjects(wire.OpPrune), admission.ClassScan, s.prune},
		{wire.OpLease, wire.APIOpSubjects(wire.OpLease), admission.ClassPoint, s.lease},
		{wire.OpSeal, wire.APIOpSubjects(wire.OpSeal), admission.ClassPoint, s.seal},
		{wire.OpDelete, wire.APIOpSubjects(wire.OpDelete), admission.ClassPoint, s.remove},
		{wire.OpFork, forkSubject, admission.ClassPoint, s.fork},
		{"admin-list", wire.AdminListSubject, admission.ClassScan, s.list},
	}
	for _, op := range ops {
		if err := svc.AddEndpoint(op.name, s.wrap(op.name, op.class, op.h), micro.WithEndpointSubject(op.subject)); err != nil {
			return fmt.Errorf("service endpoint %s: %w", op.name, err)
		}
	}
	return nil
}

// Stop stops taking requests and waits for the ones in flight to be answered.
func (s *Service) Stop(ctx context.Context) error {
	if s.svc == nil {
		return nil
	}
	err := s.svc.Stop()
	s.adm.Close()
	if derr := s.adm.Drained(ctx); derr != nil && err == nil {
		err = derr
	}
	s.peeks.stop()
	s.workers.Stop()
	return err
}

// wrap admits a request (or refuses it busy at once: this runs on the endpoint's delivery goroutine,
// which must never wait) and runs its handler on a worker goroutine (admission.Workers), decoding the namespace from
// the subject and turning errors into typed error replies. A scan reserves the bytes of the largest
// reply it can build.
func (s *Service) wrap(op string, class admission.Class, h opHandler) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		start := time.Now()
		reserve := int64(0)
		if class == admission.ClassScan {
			reserve = s.maxReply()
		}
		t, err := s.adm.Admit(class, reserve)
		if err != nil {
			s.respond(op, req, reply{}, err, start)
			return
		}
		rep, body := newWorkerReply(s.nc, req), req.Data() // req is micro's again once this returns
		s.workers.Run(func() {
			defer func() { t.Done(time.Since(start)) }()
			ctx, cancel := context.WithTimeout(admission.WithTicket(context.Background(), t), s.timeout)
			defer cancel()
			ns := wire.DefaultNamespace
			var err error
			if toks := strings.Split(rep.subject, "."); len(toks) == 4 && toks[1] == "api" {
				ns, err = wire.DecodeID(toks[2])
			} else {
				ns = "" // the admin subject: every namespace
			}
			var r reply
			if err == nil {
				r, err = h(ctx, ns, body)
			}
			s.respond(op, rep, r, err, start)
		})
	})
}

// errorHeaderRoom is what an error reply's headers take beside the message (micro's names, the
// code, the line ends).
const errorHeaderRoom = 256

// respond sends the reply, or the typed error, and counts the request.
func (s *Service) respond(op string, req replier, r reply, err error, start time.Time) {
	result := "ok"
	if err != nil {
		we := edge.ToWireError(err)
		result = we.Code
		if we.Code == wire.CodeInternal {
			s.log.Error("request failed", "op", op, "subject", req.Subject(), "err", err)
		}
		body, _ := json.Marshal(we)
		// The message may quote kilobytes a client sent, escaped, and goes twice: in the body and in
		// a header, where it takes no more than in the body. Cut to half the room, both fit.
		if room := int(s.nc.MaxPayload()) - errorHeaderRoom; len(body)+len(we.Message) > room {
			we = we.Cut(len(body) - room/2)
			body, _ = json.Marshal(we)
		}
		if err := req.Error(wire.StatusCode(we.Code), we.Message, body); err != nil { // req is a workerReply: it writes nothing micro reads
			s.log.Error("reply failed", "op", op, "subject", req.Subject(), "code", we.Code, "err", err)
		}
	} else if err := req.Respond(r.data, micro.WithHeaders(r.hdr)); err != nil {
		s.log.Error("reply failed", "op", op, "subject", req.Subject(), "bytes", len(r.data), "err", err)
	}
	s.m.Requests.WithLabelValues(op, result).Inc()
	s.results.add(op, result)
	s.m.RequestSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// decodeRequest decodes a request body into v and checks the ranges of its integers (every wire
// request type has a Validate method), so no handler sees a number that could wrap.
func decodeRequest(body []byte, v interface{ Validate() error }) error {
	if len(body) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: request body: %v", edge.ErrBadRequest, err)
	}
	return v.Validate()
}

func sessionKey(ns string, r wire.SessionRequest) (wire.Key, error) {
	k := wire.Key{Namespace: ns, Session: r.Session, Agent: r.Agent}.WithDefaults()
	return k, k.Validate()
}

// settledKey is sessionKey once every save queued for the session before the request is settled
// (read-your-writes, and no operation overtaking a save acknowledged before it).
func (s *Service) settledKey(ctx context.Context, ns string, r wire.SessionRequest) (wire.Key, error) {
	key, err := sessionKey(ns, r)
	if err != nil {
		return key, err
	}
	return key, s.awaitIngest(ctx, wire.IngestSubject(key))
}

// awaitIngest gives read-your-writes: a save whose publish was acknowledged is in CP_INGEST until it
// is settled, so a read waits until every save queued for the session (or the namespace) before
// the read began is settled. Saves queued after it do not hold it up: a writer that never pauses
// cannot starve a reader.
func (s *Service) awaitIngest(ctx context.Context, subject string) error {
	upTo, err := s.queuedUpTo(ctx, subject)
	if err != nil {
		return fmt.Errorf("%w: checking the ingest queue: %v", edge.ErrUnavailable, err)
	}
	return s.awaitQueued(ctx, subject, upTo)
}

// awaitQueued waits until the saves queued on subject up to stream sequence upTo are settled.
func (s *Service) awaitQueued(ctx context.Context, subject string, upTo uint64) error {
	wait := time.Millisecond
	from := uint64(1)
	for upTo > 0 {
		// Settled saves leave the work queue, so the oldest one left says how far ingest got.
		first, err := s.st.Read.Next(ctx, s.st.Ingest, from, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && first.Sequence > upTo {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: checking the ingest queue: %v", edge.ErrUnavailable, err)
		}
		if floor, err := s.st.AckFloor(ctx); err == nil && first.Sequence <= floor {
			// Acknowledged, yet still queued: a crash lost its removal (edge/reconcile.go).
			from = floor + 1
			go s.PurgeAcknowledged()
			continue
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: saves on %s are still being ingested", edge.ErrUnavailable, subject)
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
	return nil
}

// PurgeAcknowledged removes the saves a crash left in the queue after they were acknowledged, once
// at a time.
func (s *Service) PurgeAcknowledged() {
	if !s.purging.TryLock() {
		return
	}
	defer s.purging.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := s.st.PurgeAcknowledged(ctx); err != nil {
		s.log.Warn("ingest: could not remove acknowledged saves left in the queue", "err", err)
	} else if n > 0 {
		s.log.Warn("ingest: removed acknowledged saves a crash left in the queue", "saves", n)
	}
}

// queuedUpTo returns the stream sequence of the last save queued on subject (0: none).
func (s *Service) queuedUpTo(ctx context.Context, subject string) (uint64, error) {
	if !strings.HasSuffix(subject, ">") {
		m, err := s.st.Read.Last(ctx, s.st.Ingest, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		return m.Sequence, nil
	}
	info, err := s.st.Ingest.Info(ctx)
	if err != nil {
		return 0, err
	}
	if info.State.Msgs == 0 {
		return 0, nil
	}
	return info.State.LastSeq, nil
}

// list pages the heads of a namespace's sessions (every namespace's, on the admin subject) in the
// order they were created, once the saves queued before the request are settled (list.go).
func (s *Service) list(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.ListRequest
	if err := decodeRequest(body, &req); err != nil {
		return reply{}, err
	}
	if req.Offset != 0 {
		return reply{}, fmt.Errorf("%w: offset is not served any more: page with cursor, the cursor of the previous reply (docs/protocol.md §5)", edge.ErrBadRequest)
	}
	subject := wire.EverySubject(wire.IngestSubjectPrefix)
	if ns != "" {
		subject = wire.NamespaceSubjects(wire.IngestSubjectPrefix, wire.EncodeID(ns))
	}
	if err := s.awaitIngest(ctx, subject); err != nil {
		return reply{}, err
	}
	return s.listPage(ctx, ns, req)
}

// page encodes {"<field>": [items...], "more": true} with as many items as fit in max bytes (at least
// one, so that paging always moves on; one item is far smaller than any max payload), each item
// encoded once.
func page[T any](field string, items []T, max int64) (reply, error) {
	r, _, err := pageOf(field, items, max, nil)
	return r, err
}

// pageOf is page, and says how many items it holds; more, when set, is the "more" that follows them
// whether or not they all fit (its JSON, e.g. `,"more":true,"cursor":"…"`), computed from the last
// item sent.
func pageOf[T any](field string, items []T, max int64, more func(last T) string) (reply, int, error) {
	var b bytes.Buffer
	b.WriteString(`{"` + field + `":[`)
	n := 0
	for _, it := range items {
		enc, err := json.Marshal(it)
		if err != nil {
			return reply{}, 0, err
		}
		if n > 0 && int64(b.Len()+len(enc))+160 > max {
			break
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.Write(enc)
		n++
	}
	b.WriteByte(']')
	switch {
	case more != nil && n > 0:
		b.WriteString(more(items[n-1]))
	case n < len(items):
		b.WriteString(`,"more":true`)
	}
	b.WriteByte('}')
	return reply{data: b.Bytes()}, n, nil
}

func (s *Service) history(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.HistoryRequest
	if err := decodeRequest(body, &req); err != nil {
		return reply{}, err
	}
	key, err := sessionKey(ns, req.SessionRequest)
	if err != nil {
		return reply{}, err
	}
	if req.NewestFirst {
		return s.historyNewestFirst(ctx, key, req)
	}
	if req.Cursor != "" || req.Limit != 0 {
		return reply{}, fmt.Errorf("%w: cursor and limit page a history newest first (newestFirst: true); oldest first pages with after", edge.ErrBadRequest)
	}
	var recs []engine.Record
	err = s.afterQueued(ctx, wire.IngestSubject(key), func() (err error) {
		recs, err = s.engine.History(ctx, edge.KeyOf(key))
		return err
	})
	if err != nil {
		return reply{}, err
	}
	i, _ := slices.BinarySearchFunc(recs, req.After+1, func(r engine.Record, n uint64) int { return cmp.Compare(r.Version, n) })
	versions := make([]wire.Version, 0, len(recs)-i)
	for _, r := range recs[i:] {
		versions = append(versions, edge.VersionOf(r))
	}
	return page("versions", versions, s.maxReply()) // a wire.HistoryReply
}

func (s *Service) get(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.GetRequest
	if err := decodeRequest(body, &req); err != nil {
		return reply{}, err
	}
	v, err := s.version(ctx, ns, req.SessionRequest, req.Version)
	if err != nil {
		return reply{}, err
	}
	return jsonReply(v)
}

// version finds one version after any queued saves of its session are settled (the queue asked
// beside the engine's read when it can be: queuepeek.go), and refuses a record in a format this
// daemon does not know.
func (s *Service) version(ctx context.Context, ns string, r wire.SessionRequest, n uint64) (wire.Version, error) {
	key, err := sessionKey(ns, r)
	if err != nil {
		return wire.Version{}, err
	}
	var rec engine.Record
	err = s.afterQueued(ctx, wire.IngestSubject(key), func() (err error) {
		rec, err = s.engine.Version(ctx, edge.KeyOf(key), n)
		return err
	})
	if err != nil {
		return wire.Version{}, err
	}
	return edge.VersionOf(rec), nil
}

// read serves a piece of a read. Its first piece finds the version and assembles the body (or
// finds it cached); while the read has pieces to come its body is held under the read's key
// (readKey), so that the pieces after the first are served from it with no lookup at all. The
// first piece of a read of one version carries its record (Cp-Version): a read of the head
// (version 0) is held under the number of the version it found, which its later pieces ask for.
func (s *Service) read(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.ReadRequest
	if err := decodeReadRequest(body, &req); err != nil {
		return reply{}, err
	}
	enc := cmp.Or(req.Encoding, wire.EncodingIdentity)
	if enc != wire.EncodingIdentity && enc != wire.EncodingZstd {
		return reply{}, fmt.Errorf("%w: unknown encoding %q (reads are served as %s or %s)", edge.ErrBadRequest, enc, wire.EncodingIdentity, wire.EncodingZstd)
	}
	if req.Offset > 0 && req.Version == 0 && len(req.Merge) == 0 {
		// The head may have moved since the first piece: its later pieces name the version it was.
		return reply{}, fmt.Errorf("%w: offset %d of version 0: a read of the head is only its first piece; ask the later pieces for the version its %s header named", edge.ErrBadRequest, req.Offset, wire.HdrVersion)
	}
	if req.Offset > 0 {
		key := readKey(ns, req, enc)
		if b, ok := s.cache.Held(key); ok {
			return s.piece(ctx, b, func() string { return key }, req.Offset, "")
		}
	}
	b, v, err := s.readBody(ctx, ns, req, enc)
	if err != nil {
		return reply{}, err
	}
	record := ""
	if len(req.Merge) == 0 {
		req.Version = v.Version
		if req.Offset == 0 {
			record = s.headers.of(v, s.maxReply())
		}
	}
	// The read's key is a digest (readKey): made only for a read that continues past this piece.
	return s.piece(ctx, b, func() string { return readKey(ns, req, enc) }, req.Offset, record)
}

// readBody finds what a read names and assembles its body in encoding enc (or finds it cached),
// and returns the version it read (none for a merge).
func (s *Service) readBody(ctx context.Context, ns string, req wire.ReadRequest, enc string) (readBody, wire.Version, error) {
	if len(req.Merge) > 0 {
		data, hash, key, err := s.merged(ctx, ns, req)
		if err != nil {
			return readBody{}, wire.Version{}, err
		}
		b, err := s.encode(ctx, identityBody(data, hash), key, enc)
		return b, wire.Version{}, err
	}
	if full := (engine.View{Kind: req.View, MaxMessages: req.MaxMessages}); req.Version == 0 && enc == wire.EncodingZstd && full.IsFull() {
		return s.headZstd(ctx, ns, req.SessionRequest) // the restore of the head: its record and body in one read
	}
	v, err := s.readVersion(ctx, ns, req)
	if err != nil {
		return readBody{}, v, err
	}
	housekeeping.LargeRead(v.RawBytes) // the collector's target, lowered while a large version is read (housekeeping/eagergc.go)
	view := engine.View{Kind: req.View, MaxMessages: req.MaxMessages, Dialect: v.Dialect}
	if err := view.Check(); err != nil {
		return readBody{}, v, fmt.Errorf("%w: %v", edge.ErrBadRequest, err)
	}
	if enc == wire.EncodingZstd && view.IsFull() {
		b, err := s.fullZstd(ctx, v)
		return b, v, err
	}
	data, hash, key, err := s.viewOf(ctx, v, view)
	if err != nil {
		return readBody{}, v, err
	}
	b, err := s.encode(ctx, identityBody(data, hash), key, enc)
	return b, v, err
}

// piece is the reply to a read: the bytes of b from offset on, as many as fit in one message (a
// piece of docs/protocol.md §12, numbered by offset). While the read has pieces to come, b is held
// under the read's key, keyOf() (until its last piece, or until it has been idle for readIdle). The
// reply's bytes count against the read budget until it is sent. record, when not "", is the
// Cp-Version header of a first piece, whose bytes it leaves room for.
func (s *Service) piece(ctx context.Context, b readBody, keyOf func() string, offset int64, record string) (reply, error) {
	room := s.maxReply() - int64(len(record)) // versionHeader keeps record under half of maxReply
	data, err := pieces.Cut(b.data, offset, room)
	if err != nil {
		return reply{}, fmt.Errorf("%w: %v", edge.ErrBadRequest, err)
	}
	if offset+int64(len(data)) < int64(len(b.data)) {
		housekeeping.LargeRead(b.raw) // a large read comes in pieces, one request each
		// The next pieces cost no lookup and no assembly. A first piece is served from the body held
		// for the key, if that is the same content, so that its later pieces continue its bytes.
		b = s.cache.HoldBody(keyOf(), b, offset == 0)
		if data, err = pieces.Cut(b.data, offset, room); err != nil {
			return reply{}, fmt.Errorf("%w: %v", edge.ErrBadRequest, err)
		}
	} else if offset > 0 {
		s.cache.Release(keyOf())
	}
	if err := admission.TicketOf(ctx).Take(int64(len(data))); err != nil {
		return reply{}, err
	}
	total := int64(len(b.data))
	hdr := micro.Headers{
		wire.HdrTotal:    {strconv.FormatInt(total, 10)},
		wire.HdrOffset:   {strconv.FormatInt(offset, 10)},
		wire.HdrEncoding: {b.enc},
		wire.HdrHash:     {b.hash},
	}
	if b.enc != wire.EncodingIdentity {
		hdr[wire.HdrRawTotal] = []string{strconv.FormatInt(b.raw, 10)}
	}
	if record != "" {
		hdr[wire.HdrVersion] = []string{record}
	}
	return reply{data: data, hdr: hdr}, nil
}

// merged returns the merged view of the agents and versions a read names, its hash and its cache
// key. The versions are pinned by the client, so every piece of one read sees the same view.
func (s *Service) merged(ctx context.Context, ns string, req wire.ReadRequest) ([]byte, string, string, error) {
	if req.View != "" && req.View != engine.ViewFull {
		return nil, "", "", fmt.Errorf("%w: a merged view takes no view %q (only maxMessages)", edge.ErrBadRequest, req.View)
	}
	if err := (engine.View{MaxMessages: req.MaxMessages}).Check(); err != nil {
		return nil, "", "", fmt.Errorf("%w: %v", edge.ErrBadRequest, err)
	}
	agents := make([]string, 0, len(req.Merge))
	for a := range req.Merge {
		agents = append(agents, a)
	}
	slices.Sort(agents)
	cacheKey := fmt.Sprintf("merged/%s/%d/%v", wire.EncodeID(ns), req.MaxMessages, req.AgentPrefix)
	versions := make([]wire.Version, 0, len(agents))
	for _, a := range agents {
		if req.Merge[a] == 0 {
			return nil, "", "", fmt.Errorf("%w: merge needs an exact version for agent %q", edge.ErrBadRequest, a)
		}
		v, err := s.exactVersion(ctx, ns, wire.SessionRequest{Session: req.Session, Agent: a}, req.Merge[a])
		if err != nil {
			return nil, "", "", err
		}
		versions = append(versions, v)
		cacheKey += "/" + wire.EncodeID(a) + "@" + v.Hash + "/" + v.Dialect
	}
	// The agents' conversations are read only when the merged view is not cached: not once per piece.
	data, err := s.cache.GetOrLoad(cacheKey, func() ([]byte, error) {
		if err := takeLoad(ctx, 2, versions...); err != nil { // the agents' conversations, then their merge
			return nil, err
		}
		convs := make([]engine.AgentConversation, 0, len(versions))
		for i, v := range versions {
			full, err := s.conversation(ctx, v)
			if err != nil {
				return nil, err
			}
			convs = append(convs, engine.AgentConversation{Agent: agents[i], Messages: codec.SplitCanonical(full[1 : len(full)-1])})
		}
		merged := engine.Merge(convs, req.AgentPrefix)
		return engine.Encode(engine.View{MaxMessages: req.MaxMessages, Dialect: commonDialect(versions)}.Apply(merged)), nil
	})
	if err != nil {
		return nil, "", "", err
	}
	return data, s.cache.Hash(cacheKey, data), cacheKey, nil
}

func (s *Service) prune(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.PruneRequest
	if err := decodeRequest(body, &req); err != nil {
		return reply{}, err
	}
	ret := s.policy.Get().For(ns)
	if req.KeepLast != 0 || req.MaxAgeSeconds != 0 {
		ret = engine.Retention{KeepLast: req.KeepLast, MaxAge: time.Duration(req.MaxAgeSeconds) * time.Second}
	}
	if ret.KeepLast < 0 || ret.MaxAge < 0 {
		return reply{}, fmt.Errorf("%w: negative retention limit", edge.ErrBadRequest)
	}
	if ret == (engine.Retention{}) {
		return reply{}, fmt.Errorf("%w: no retention given and none configured for namespace %q (give keepLast or maxAgeSeconds)", edge.ErrBadRequest, ns)
	}
	var res []wire.PruneResult
	var err error
	if req.Session != "" {
		key, kerr := s.settledKey(ctx, ns, wire.SessionRequest{Session: req.Session, Agent: req.Agent})
		if kerr != nil {
			return reply{}, kerr
		}
		if _, err := s.engine.Head(ctx, edge.KeyOf(key)); err != nil {
			return reply{}, err
		}
		res, err = housekeeping.PruneSessions(ctx, s.engine, []engine.Key{edge.KeyOf(key)}, func(string) engine.Retention { return ret }, req.DryRun)
	} else {
		res, err = housekeeping.PruneNamespace(ctx, s.engine, ns, func(string) engine.Retention { return ret }, req.DryRun)
	}
	if !req.DryRun {
		s.DropPrunedReads(res)
	}
	if err != nil {
		return reply{}, err
	}
	return jsonReply(wire.PruneReply{Sessions: res})
}

// DropPrunedReads lets go of the held reads of every session a prune removed versions from: their
// later pieces are looked up again, so a removed version is not served on from a hold.
func (s *Service) DropPrunedReads(res []wire.PruneResult) {
	for _, r := range res {
		if len(r.Versions) > 0 {
			s.cache.DropHeld(readSession(r.Key.Namespace, r.Key.Session))
		}
	}
}

// viewOf returns the bytes of a view of v, their hash and their cache key. Versions are immutable,
// so results are cached by the version's hash and the view: the pieces of one large read cost one
// assembly. A view other than full caches only itself, not the conversation it was cut from.
func (s *Service) viewOf(ctx context.Context, v wire.Version, view engine.View) ([]byte, string, string, error) {
	ns := wire.EncodeID(v.Key.Namespace)
	if view.IsFull() {
		key := "conv/" + ns + "/" + v.Hash
		full, err := s.cache.GetOrLoad(key, func() ([]byte, error) {
			if err := takeLoad(ctx, 1, v); err != nil {
				return nil, err
			}
			return s.conversation(ctx, v)
		})
		return full, v.Hash, key, err
	}
	key := fmt.Sprintf("view/%s/%s/%s/%d/%s", ns, v.Hash, view.Kind, view.MaxMessages, view.Dialect)
	data, err := s.cache.GetOrLoad(key, func() ([]byte, error) {
		if err := takeLoad(ctx, 2, v); err != nil { // the conversation, then the view cut from it
			return nil, err
		}
		full, err := s.conversation(ctx, v)
		if err != nil {
			return nil, err
		}
		return engine.Encode(view.Apply(codec.SplitCanonical(full[1 : len(full)-1]))), nil
	})
	if err != nil {
		return nil, "", "", err
	}
	return data, s.cache.Hash(key, data), key, nil
}

// conversation reads the conversation of v from the engine. v was looked up before: the version
// read must still be that one (a session deleted and saved again meanwhile has another version
// of the same number), or the read is refused, to be asked again.
func (s *Service) conversation(ctx context.Context, v wire.Version) ([]byte, error) {
	conv, rec, err := s.engine.Read(ctx, edge.KeyOf(v.Key), v.Version, engine.ReadOptions{})
	if err != nil {
		return nil, err
	}
	if rec.Hash != v.Hash {
		return nil, fmt.Errorf("%w: version %d of %s changed while it was read (the session was deleted and saved again); read it again", edge.ErrUnavailable, v.Version, v.Key)
	}
	return conv, nil
}

// commonDialect is the dialect of versions if they all share one, else native: a merged view of
// agents saved in different shapes cuts by the native rules.
func commonDialect(versions []wire.Version) string {
	if len(versions) == 0 {
		return ""
	}
	for _, v := range versions[1:] {
		if v.Dialect != versions[0].Dialect {
			return ""
		}
	}
	return versions[0].Dialect
}

// takeLoad reserves, against the read budget, the bytes of loading versions' conversations (times
// copies: a merge or a view is built beside what it is cut from) for the rest of the request.
func takeLoad(ctx context.Context, copies int64, versions ...wire.Version) error {
	var n int64
	for _, v := range versions {
		n += v.RawBytes
	}
	return admission.TicketOf(ctx).Take(copies * n)
}

// maxReply leaves room for headers under the server's max_payload.
func (s *Service) maxReply() int64 {
	return max(pieces.Size(s.nc.MaxPayload(), pieces.ReplyRoom), 1024)
}

func jsonReply(v any) (reply, error) {
	data, err := json.Marshal(v)
	return reply{data: data}, err
}
