package transfer

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
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// service answers the read side of the protocol as a nats.go micro service, so `nats micro ls`,
// `$SRV.PING|INFO|STATS` and per-endpoint statistics come for free.
type service struct {
	nc       *nats.Conn
	st       *streams
	store    snapshot.Store
	cache    *byteCache
	log      *slog.Logger
	m        *metrics.Metrics
	timeout  time.Duration
	semver   string
	svc      micro.Service
	inflight chan struct{} // bounds concurrent handlers
	policy   RetentionPolicy
}

type reply struct {
	data []byte
	hdr  micro.Headers
}

type opHandler func(ctx context.Context, ns string, body []byte) (reply, error)

func (s *service) start() error {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        wire.ServiceName,
		Version:     s.semver,
		Description: "Durable, versioned checkpoints of agent conversations",
		QueueGroup:  wire.ServiceName,
		Metadata:    map[string]string{"protocol": wire.ProtocolVersion},
	})
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	s.svc = svc
	ops := []struct {
		name    string
		subject string
		h       opHandler
	}{
		{wire.OpList, "cp.api.*." + wire.OpList, s.list},
		{wire.OpHistory, "cp.api.*." + wire.OpHistory, s.history},
		{wire.OpGet, "cp.api.*." + wire.OpGet, s.get},
		{wire.OpRead, "cp.api.*." + wire.OpRead, s.read},
		{wire.OpPrune, "cp.api.*." + wire.OpPrune, s.prune},
		{wire.OpLease, "cp.api.*." + wire.OpLease, s.lease},
		{wire.OpSeal, "cp.api.*." + wire.OpSeal, s.seal},
		{wire.OpDelete, "cp.api.*." + wire.OpDelete, s.remove},
		{"admin-list", wire.AdminListSubject, s.list},
	}
	for _, op := range ops {
		if err := svc.AddEndpoint(op.name, s.wrap(op.name, op.h), micro.WithEndpointSubject(op.subject)); err != nil {
			return fmt.Errorf("service endpoint %s: %w", op.name, err)
		}
	}
	return nil
}

// stop stops taking requests and waits for the ones in flight to be answered.
func (s *service) stop(ctx context.Context) error {
	if s.svc == nil {
		return nil
	}
	err := s.svc.Stop()
	for i := 0; i < cap(s.inflight); i++ {
		select {
		case s.inflight <- struct{}{}:
		case <-ctx.Done():
			return err
		}
	}
	return err
}

// wrap runs a handler on its own goroutine (a slow read must not hold up the endpoint), decodes the
// namespace from the subject and turns errors into typed error replies.
func (s *service) wrap(op string, h opHandler) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		s.inflight <- struct{}{}
		go func() {
			defer func() { <-s.inflight }()
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			defer cancel()
			ns := wire.DefaultNamespace
			var err error
			if toks := strings.Split(req.Subject(), "."); len(toks) == 4 && toks[1] == "api" {
				ns, err = wire.DecodeID(toks[2])
			} else {
				ns = "" // the admin subject: every namespace
			}
			var r reply
			if err == nil {
				r, err = h(ctx, ns, req.Data())
			}
			result := "ok"
			if err != nil {
				we := toWireError(err)
				result = we.Code
				if we.Code == wire.CodeInternal {
					s.log.Error("request failed", "op", op, "subject", req.Subject(), "err", err)
				}
				body, _ := json.Marshal(we)
				_ = req.Error(wire.StatusCode(we.Code), we.Message, body)
			} else {
				if err := req.Respond(r.data, micro.WithHeaders(r.hdr)); err != nil {
					s.log.Error("reply failed", "op", op, "subject", req.Subject(), "bytes", len(r.data), "err", err)
				}
			}
			s.m.Requests.WithLabelValues(op, result).Inc()
			s.m.RequestSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
		}()
	})
}

// decodeRequest decodes a request body into v and checks the ranges of its integers (every wire
// request type has a Validate method), so no handler sees a number that could wrap.
func decodeRequest(body []byte, v interface{ Validate() error }) error {
	if len(body) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: request body: %v", errBadRequest, err)
	}
	return v.Validate()
}

func sessionKey(ns string, r wire.SessionRequest) (wire.Key, error) {
	k := wire.Key{Namespace: ns, Session: r.Session, Agent: r.Agent}.WithDefaults()
	return k, k.Validate()
}

// settledKey is sessionKey once every save queued for the session before the request is settled
// (read-your-writes, and no operation overtaking a save acknowledged before it).
func (s *service) settledKey(ctx context.Context, ns string, r wire.SessionRequest) (wire.Key, error) {
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
func (s *service) awaitIngest(ctx context.Context, subject string) error {
	upTo, err := s.queuedUpTo(ctx, subject)
	if err != nil {
		return fmt.Errorf("%w: checking the ingest queue: %v", errUnavailable, err)
	}
	wait := time.Millisecond
	for upTo > 0 {
		// Settled saves leave the work queue, so the oldest one left says how far ingest got.
		first, err := s.st.read.next(ctx, s.st.ingest, 1, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && first.Sequence > upTo {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: checking the ingest queue: %v", errUnavailable, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: saves on %s are still being ingested", errUnavailable, subject)
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
	return nil
}

// queuedUpTo returns the stream sequence of the last save queued on subject (0: none).
func (s *service) queuedUpTo(ctx context.Context, subject string) (uint64, error) {
	if !strings.HasSuffix(subject, ">") {
		m, err := s.st.read.last(ctx, s.st.ingest, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		return m.Sequence, nil
	}
	info, err := s.st.ingest.Info(ctx)
	if err != nil {
		return 0, err
	}
	if info.State.Msgs == 0 {
		return 0, nil
	}
	return info.State.LastSeq, nil
}

func (s *service) list(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.ListRequest
	if err := decodeRequest(body, &req); err != nil {
		return reply{}, err
	}
	subject := "cp.ingest.>"
	if ns != "" {
		subject = "cp.ingest." + wire.EncodeID(ns) + ".>"
	}
	if err := s.awaitIngest(ctx, subject); err != nil {
		return reply{}, err
	}
	all, err := s.store.Heads(ctx, ns)
	if err != nil {
		return reply{}, err
	}
	heads := make([]wire.SessionHead, 0, len(all))
	for _, h := range all {
		if h.Exists() && (req.Session == "" || h.Key.Session == req.Session) {
			heads = append(heads, wire.SessionHead{Version: h.Version, Lease: h.Lease, Moved: h.Moved})
		}
	}
	slices.SortFunc(heads, func(a, b wire.SessionHead) int {
		return cmp.Or(cmp.Compare(a.Key.Namespace, b.Key.Namespace), cmp.Compare(a.Key.Session, b.Key.Session), cmp.Compare(a.Key.Agent, b.Key.Agent))
	})
	if req.Offset < 0 {
		return reply{}, fmt.Errorf("%w: negative offset", errBadRequest)
	}
	heads = heads[min(req.Offset, len(heads)):]
	return page("sessions", heads, s.maxReply()) // a wire.ListReply
}

// page encodes {"<field>": [items...], "more": true} with as many items as fit in max bytes (at least
// one, so that paging always moves on; one item is far smaller than any max payload), each item
// encoded once.
func page[T any](field string, items []T, max int64) (reply, error) {
	var b bytes.Buffer
	b.WriteString(`{"` + field + `":[`)
	n := 0
	for _, it := range items {
		enc, err := json.Marshal(it)
		if err != nil {
			return reply{}, err
		}
		if n > 0 && int64(b.Len()+len(enc))+32 > max {
			break
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.Write(enc)
		n++
	}
	b.WriteByte(']')
	if n < len(items) {
		b.WriteString(`,"more":true`)
	}
	b.WriteByte('}')
	return reply{data: b.Bytes()}, nil
}

func (s *service) history(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.HistoryRequest
	if err := decodeRequest(body, &req); err != nil {
		return reply{}, err
	}
	key, err := s.settledKey(ctx, ns, req.SessionRequest)
	if err != nil {
		return reply{}, err
	}
	versions, err := snapshot.History(ctx, s.store, key)
	if err != nil {
		return reply{}, notFound(err, key)
	}
	i, _ := slices.BinarySearchFunc(versions, req.After+1, func(v wire.Version, n uint64) int { return cmp.Compare(v.Version, n) })
	versions = versions[i:]
	return page("versions", versions, s.maxReply()) // a wire.HistoryReply
}

func (s *service) get(ctx context.Context, ns string, body []byte) (reply, error) {
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

// version finds one version after any queued saves of its session are settled, and refuses a
// record in a format this daemon does not know.
func (s *service) version(ctx context.Context, ns string, r wire.SessionRequest, n uint64) (wire.Version, error) {
	key, err := s.settledKey(ctx, ns, r)
	if err != nil {
		return wire.Version{}, err
	}
	v, err := snapshot.GetVersion(ctx, s.store, key, n, s.cache)
	if err != nil {
		return wire.Version{}, notFound(err, key)
	}
	return v, snapshot.CheckFormat(v)
}

func (s *service) read(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.ReadRequest
	if err := decodeRequest(body, &req); err != nil {
		return reply{}, err
	}
	if len(req.Merge) > 0 {
		data, hash, key, err := s.merged(ctx, ns, req)
		if err != nil {
			return reply{}, err
		}
		return s.piece(data, hash, key, req.Offset)
	}
	if req.Version == 0 {
		return reply{}, fmt.Errorf("%w: read needs an exact version (ask %s for the head first)", errBadRequest, wire.OpGet)
	}
	if enc := cmp.Or(req.Encoding, wire.EncodingIdentity); enc != wire.EncodingIdentity {
		return reply{}, fmt.Errorf("%w: unknown encoding %q (reads are served as identity)", errBadRequest, enc)
	}
	v, err := s.version(ctx, ns, req.SessionRequest, req.Version)
	if err != nil {
		return reply{}, err
	}
	if v.RawBytes >= largeBytes {
		eager.hold(2 * time.Second) // a large read comes in pieces, one request each (eagergc.go)
	}
	view := snapshot.View{Kind: req.View, MaxMessages: req.MaxMessages}
	if err := view.Check(); err != nil {
		return reply{}, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	data, hash, key, err := s.viewOf(ctx, v, view)
	if err != nil {
		return reply{}, err
	}
	return s.piece(data, hash, key, req.Offset)
}

// piece is the reply to a read: the bytes of data (cached under key) from offset on, as many as fit
// in one message. The cache holds a read's bytes until its last piece.
func (s *service) piece(data []byte, hash, key string, offset int64) (reply, error) {
	total := int64(len(data))
	if offset < 0 || offset > total {
		return reply{}, fmt.Errorf("%w: offset %d is outside 0..%d", errBadRequest, offset, total)
	}
	end := min(offset+s.maxReply(), total)
	if end < total {
		s.cache.Hold(key, data, hash, offset == 0) // the next pieces cost no assembly
	} else if offset > 0 {
		s.cache.Release(key)
	}
	return reply{data: data[offset:end], hdr: micro.Headers{
		wire.HdrTotal:    {strconv.FormatInt(total, 10)},
		wire.HdrOffset:   {strconv.FormatInt(offset, 10)},
		wire.HdrEncoding: {wire.EncodingIdentity},
		wire.HdrHash:     {hash},
	}}, nil
}

// merged returns the merged view of the agents and versions a read names, its hash and its cache
// key. The versions are pinned by the client, so every piece of one read sees the same view.
func (s *service) merged(ctx context.Context, ns string, req wire.ReadRequest) ([]byte, string, string, error) {
	if req.View != "" && req.View != snapshot.ViewFull {
		return nil, "", "", fmt.Errorf("%w: a merged view takes no view %q (only maxMessages)", errBadRequest, req.View)
	}
	if err := (snapshot.View{MaxMessages: req.MaxMessages}).Check(); err != nil {
		return nil, "", "", fmt.Errorf("%w: %v", errBadRequest, err)
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
			return nil, "", "", fmt.Errorf("%w: merge needs an exact version for agent %q", errBadRequest, a)
		}
		v, err := s.version(ctx, ns, wire.SessionRequest{Session: req.Session, Agent: a}, req.Merge[a])
		if err != nil {
			return nil, "", "", err
		}
		versions = append(versions, v)
		cacheKey += "/" + wire.EncodeID(a) + "@" + v.Hash
	}
	// The agents' conversations are read only when the merged view is not cached: not once per piece.
	data, err := s.cache.GetOrLoad(cacheKey, func() ([]byte, error) {
		convs := make([]snapshot.AgentConversation, 0, len(versions))
		for i, v := range versions {
			full, err := snapshot.Read(ctx, s.store, v, s.cache)
			if err != nil {
				return nil, err
			}
			convs = append(convs, snapshot.AgentConversation{Agent: agents[i], Messages: codec.SplitCanonical(full[1 : len(full)-1])})
		}
		merged := snapshot.Merge(convs, req.AgentPrefix)
		return snapshot.Encode(snapshot.View{MaxMessages: req.MaxMessages}.Apply(merged)), nil
	})
	if err != nil {
		return nil, "", "", err
	}
	return data, s.cache.Hash(cacheKey, data), cacheKey, nil
}

func (s *service) prune(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.PruneRequest
	if err := decodeRequest(body, &req); err != nil {
		return reply{}, err
	}
	ret := s.policy.For(ns)
	if req.KeepLast != 0 || req.MaxAgeSeconds != 0 {
		ret = snapshot.Retention{KeepLast: req.KeepLast, MaxAge: time.Duration(req.MaxAgeSeconds) * time.Second}
	}
	if ret.KeepLast < 0 || ret.MaxAge < 0 {
		return reply{}, fmt.Errorf("%w: negative retention limit", errBadRequest)
	}
	if ret == (snapshot.Retention{}) {
		return reply{}, fmt.Errorf("%w: no retention given and none configured for namespace %q (give keepLast or maxAgeSeconds)", errBadRequest, ns)
	}
	var heads []snapshot.Head
	if req.Session != "" {
		key, err := s.settledKey(ctx, ns, wire.SessionRequest{Session: req.Session, Agent: req.Agent})
		if err != nil {
			return reply{}, err
		}
		h, _, err := s.store.Head(ctx, key)
		if err != nil {
			return reply{}, notFound(err, key)
		}
		heads = []snapshot.Head{h}
	} else {
		var err error
		if heads, err = s.store.Heads(ctx, ns); err != nil {
			return reply{}, err
		}
	}
	res, err := pruneSessions(ctx, s.store, heads, func(string) snapshot.Retention { return ret }, req.DryRun)
	if err != nil {
		return reply{}, err
	}
	return jsonReply(wire.PruneReply{Sessions: res})
}

// viewOf returns the bytes of a view of v, their hash and their cache key. Versions are immutable,
// so results are cached by the version's hash and the view: the pieces of one large read cost one
// assembly. A view other than full caches only itself, not the conversation it was cut from.
func (s *service) viewOf(ctx context.Context, v wire.Version, view snapshot.View) ([]byte, string, string, error) {
	ns := wire.EncodeID(v.Key.Namespace)
	if view.IsFull() {
		key := "conv/" + ns + "/" + v.Hash
		full, err := s.cache.GetOrLoad(key, func() ([]byte, error) {
			return snapshot.Read(ctx, s.store, v, s.cache)
		})
		return full, v.Hash, key, err
	}
	key := fmt.Sprintf("view/%s/%s/%s/%d", ns, v.Hash, view.Kind, view.MaxMessages)
	data, err := s.cache.GetOrLoad(key, func() ([]byte, error) {
		full, err := snapshot.Read(ctx, s.store, v, s.cache)
		if err != nil {
			return nil, err
		}
		return snapshot.Encode(view.Apply(codec.SplitCanonical(full[1 : len(full)-1]))), nil
	})
	if err != nil {
		return nil, "", "", err
	}
	return data, s.cache.Hash(key, data), key, nil
}

// maxReply leaves room for headers under the server's max_payload.
func (s *service) maxReply() int64 { return max(s.nc.MaxPayload()-8*1024, 1024) }

func jsonReply(v any) (reply, error) {
	data, err := json.Marshal(v)
	return reply{data: data}, err
}

func notFound(err error, key wire.Key) error {
	if !errors.Is(err, snapshot.ErrNotFound) {
		return err
	}
	return fmt.Errorf("session %s: %w", key, err) // snapshot.GetVersion names the version
}
