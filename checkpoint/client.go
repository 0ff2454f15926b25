// Package checkpoint is the Go client of checkpointd: agent processes use it to save their
// conversation after each turn and to restore it, on this host or another.
//
//	c, err := checkpoint.Connect("nats://127.0.0.1:4222", nil) // nil: no extra nats.Options
//	...
//	key := checkpoint.Key{Session: "support-ticket-42"}
//	v, err := c.Save(ctx, key, conversationJSON)               // durable when it returns
//	conv, v, err := c.Restore(ctx, key, 0)                      // 0: the head
//
// (The package's Example, compiled and run against a real daemon by go test.)
//
// A conversation is the JSON array of role-tagged messages agent runtimes already keep; it comes back
// exactly as saved, every field and digit (only insignificant whitespace is dropped).
// Refusals are *Error values matching the sentinels (ErrConflict, ErrInvalid, ...) with errors.Is.
package checkpoint

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	neturl "net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Key names one agent's conversation. Namespace defaults to "default" and Agent to "main"; any
// UTF-8 string of up to 256 bytes works as an id.
type Key = wire.Key

// Version is the record of one stored version: its number, parent, hash, sizes and counts.
type Version = wire.Version

// Counts are the message counts of a version.
type Counts = wire.Counts

// Client talks to checkpointd over a NATS connection. It is safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	ownConn bool
	timeout time.Duration
	writer  string
	// maxRestore bounds what a restore decodes where the version record gives no size (a merge).
	maxRestore int64
	// ingestOnly: saves skip the request to the daemons and go to the ingest stream (WithIngestSaves).
	ingestOnly bool
	// compressFrom is the body size from which saves travel compressed (WithCompressFrom).
	compressFrom int
	// compressFromSet: WithCompressFrom was given, and is followed on loopback connections too.
	compressFromSet bool
	// answered: a daemon answered a save request, and has not been missing for longer than
	// noRespondersWindow since; "no responders" then means the daemons are reconnecting (save.go).
	answered atomic.Bool

	mu   sync.Mutex
	last map[Key]lastSave // the last save of each session, for sending only what grew

	appends appendQueues // AppendAsync's queues, by session (appendasync.go)
}

// Option configures a Client.
type Option func(*Client)

// WithTimeout bounds calls whose context has no deadline (default 30s).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithMaxRestoreBytes bounds the conversation a merged restore may return (default 1 GiB); a
// restore of one version is bounded by the size its record gives.
func WithMaxRestoreBytes(n int64) Option { return func(c *Client) { c.maxRestore = n } }

// WithIngestSaves makes every save go to the ingest stream (docs/protocol.md §4.1), queued until a
// daemon settles it, without first asking a daemon to save it as a request (§4.0), as clients did
// before checkpointd 0.4. Slower: it is for comparing the two paths (checkpointbench).
func WithIngestSaves() Option { return func(c *Client) { c.ingestOnly = true } }

// WithCompressFrom sets the size from which a save's body travels zstd-compressed (default
// DefaultCompressFrom, 32 KiB); smaller bodies go as they are. Lower it on a slow link to the NATS
// servers, where bytes cost more than the CPU to compress them; 0 compresses every body. Without
// it, over a loopback connection a body that fits one message as it is, a save's or an AppendAsync
// group's item, travels as it is (save.go, saveCompressFrom; appendasync.go, groupCompressFrom);
// given, it is followed on every connection: a server on this host may route the saves to a daemon
// across a slow link.
func WithCompressFrom(bytes int) Option {
	return func(c *Client) { c.compressFrom, c.compressFromSet = max(bytes, 0), true }
}

// WithWriter names this process in the versions it writes (default "host/pid").
func WithWriter(name string) Option { return func(c *Client) { c.writer = name } }

// New returns a client over an existing connection, which the caller keeps and closes.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	c := &Client{nc: nc, js: js, timeout: 30 * time.Second, maxRestore: 1 << 30, writer: cmp.Or(host, "unknown") + "/" + strconv.Itoa(os.Getpid()),
		compressFrom: DefaultCompressFrom, last: map[Key]lastSave{}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Connect dials url (a comma-separated list for a cluster) and returns a client that owns the
// connection; Close closes it. natsOpts are passed to nats.Connect (credentials, TLS, ...).
func Connect(url string, natsOpts []nats.Option, opts ...Option) (*Client, error) {
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("checkpoint client")}, natsOpts...)...)
	if err != nil {
		e := unavailable("connecting to %s: %v", PublicURL(url), err).(*Error)
		e.Cause = err
		return nil, e
	}
	c, err := New(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.ownConn = true
	return c, nil
}

// PublicURL is urls (one NATS URL, or a comma-separated list) without the credentials any of them
// carries (nats://user:password@host, nats://token@host): for error messages, and for what is
// recorded elsewhere (where a migrated session moved to, a bundle's source). Anything that does not
// parse as a URL is returned as it is.
func PublicURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			u.User = nil
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// Close closes the connection if Connect opened it.
func (c *Client) Close() {
	if c.ownConn {
		c.nc.Close()
	}
}

// Session is one session in a listing: its head version (embedded), its lease and, if it was
// migrated away, where to.
type Session = wire.SessionHead

// LeaseInfo is a session's lease as the daemon reports it: epoch, owner, expiry.
type LeaseInfo = wire.Lease

// List returns the head of every session in namespace ("" for the default namespace).
func (c *Client) List(ctx context.Context, namespace string) ([]Session, error) {
	return c.list(ctx, wire.APISubject(cmp.Or(namespace, wire.DefaultNamespace), wire.OpList), "")
}

// ListAll returns the head of every session of every namespace (an operator's request).
func (c *Client) ListAll(ctx context.Context) ([]Session, error) {
	return c.list(ctx, wire.AdminListSubject, "")
}

// MaxListLimit is the most sessions a page of ListPage or ListAllPage may ask for.
const MaxListLimit = wire.MaxListLimit

// SessionPage is one page of a listing: sessions in the order they were created (namespace after
// namespace, sorted, for ListAllPage), and where the next page starts.
type SessionPage struct {
	Sessions []Session
	// Next is the cursor of the next page, "" after the last page: pass it to the same method, with
	// the same namespace, to go on.
	Next string
}

// ListPage returns one page of namespace's sessions ("" for the default namespace) in the order
// they were created, from cursor ("" for the first page): at most limit of them, exactly limit
// unless the listing ends first or they do not fit in one reply (a few hundred bytes a head: about
// 2,400 in NATS's default 1 MiB); limit 0 asks for as many as fit. limit is 0..MaxListLimit.
// Sessions created while a listing is under way are on a later page or on none.
func (c *Client) ListPage(ctx context.Context, namespace, cursor string, limit int) (SessionPage, error) {
	return c.listPage(ctx, wire.APISubject(cmp.Or(namespace, wire.DefaultNamespace), wire.OpList), cursor, limit)
}

// ListAllPage is ListPage over every namespace (an operator's request, as ListAll).
func (c *Client) ListAllPage(ctx context.Context, cursor string, limit int) (SessionPage, error) {
	return c.listPage(ctx, wire.AdminListSubject, cursor, limit)
}

func (c *Client) listPage(ctx context.Context, subject, cursor string, limit int) (SessionPage, error) {
	if limit < 0 || limit > MaxListLimit {
		return SessionPage{}, &Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("list: limit %d is outside 0..%d (0: as many as fit in one reply)", limit, MaxListLimit), Index: -1, Offset: -1}
	}
	var rep wire.ListReply
	if err := c.call(ctx, subject, wire.ListRequest{Cursor: cursor, Limit: limit}, &rep); err != nil {
		return SessionPage{}, err
	}
	if !rep.More {
		return SessionPage{Sessions: rep.Sessions}, nil
	}
	if rep.Cursor == "" || rep.Cursor == cursor { // a loop over pages would never end
		return SessionPage{}, &Error{Code: wire.CodeInternal, Message: "list: the daemon says more but gives no new cursor", Index: -1, Offset: -1}
	}
	return SessionPage{Sessions: rep.Sessions, Next: rep.Cursor}, nil
}

// list gathers every page of a listing, following the daemon's cursor, and sorts the sessions by
// namespace, session and agent (the daemon lists them in the order they were created).
func (c *Client) list(ctx context.Context, subject, session string) ([]Session, error) {
	var all []Session
	req := wire.ListRequest{Session: session}
	for {
		var rep wire.ListReply
		if err := c.call(ctx, subject, req, &rep); err != nil {
			return nil, err
		}
		all = append(all, rep.Sessions...)
		if !rep.More || rep.Cursor == "" || rep.Cursor == req.Cursor {
			break
		}
		req.Cursor = rep.Cursor
	}
	slices.SortFunc(all, func(a, b Session) int {
		return cmp.Or(cmp.Compare(a.Key.Namespace, b.Key.Namespace), cmp.Compare(a.Key.Session, b.Key.Session), cmp.Compare(a.Key.Agent, b.Key.Agent))
	})
	return all, nil
}

// History returns every version of a session, oldest first.
func (c *Client) History(ctx context.Context, key Key) ([]Version, error) {
	key, err := checkKey(key)
	if err != nil {
		return nil, err
	}
	var all []Version
	req := wire.HistoryRequest{SessionRequest: sessionRequest(key)}
	for {
		var rep wire.HistoryReply
		if err := c.call(ctx, wire.APISubject(key.Namespace, wire.OpHistory), req, &rep); err != nil {
			return nil, err
		}
		all = append(all, rep.Versions...)
		if !rep.More || len(rep.Versions) == 0 {
			return all, nil
		}
		req.After = rep.Versions[len(rep.Versions)-1].Version
	}
}

// RecentHistory returns up to limit of the newest versions of a session, newest first (limit 0:
// every version). The daemon reads them from the head back, so a long history's recent versions
// cost little.
func (c *Client) RecentHistory(ctx context.Context, key Key, limit int) ([]Version, error) {
	key, err := checkKey(key)
	if err != nil {
		return nil, err
	}
	var all []Version
	req := wire.HistoryRequest{SessionRequest: sessionRequest(key), NewestFirst: true}
	for {
		if limit > 0 {
			req.Limit = limit - len(all)
		}
		var rep wire.HistoryReply
		if err := c.call(ctx, wire.APISubject(key.Namespace, wire.OpHistory), req, &rep); err != nil {
			return nil, err
		}
		all = append(all, rep.Versions...)
		if limit > 0 && len(all) >= limit {
			return all[:limit], nil
		}
		if !rep.More || rep.Cursor == "" || rep.Cursor == req.Cursor || len(rep.Versions) == 0 {
			return all, nil
		}
		req.Cursor = rep.Cursor
	}
}

// Get returns the record of one version (the head when version is 0) without its conversation.
func (c *Client) Get(ctx context.Context, key Key, version uint64) (Version, error) {
	key, err := checkKey(key)
	if err != nil {
		return Version{}, err
	}
	var v Version
	err = c.call(ctx, wire.APISubject(key.Namespace, wire.OpGet), wire.GetRequest{SessionRequest: sessionRequest(key), Version: version}, &v)
	return v, err
}

func checkKey(k Key) (Key, error) {
	k = k.WithDefaults()
	if err := k.Validate(); err != nil {
		return k, &Error{Code: wire.CodeBadRequest, Message: "session key: " + err.Error(), Index: -1, Offset: -1}
	}
	return k, nil
}

func sessionRequest(k Key) wire.SessionRequest {
	return wire.SessionRequest{Session: k.Session, Agent: k.Agent}
}

func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

// call sends a JSON request and decodes a JSON reply into out.
func (c *Client) call(ctx context.Context, subject string, req, out any) error {
	msg, err := c.request(ctx, subject, req)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		return &Error{Code: wire.CodeInternal, Message: fmt.Sprintf("reply on %s: %v", subject, err), Index: -1, Offset: -1}
	}
	return nil
}

// request sends one service request and turns error replies into *Error. A busy daemon is asked
// again after the wait it hints at (with jitter, growing when it stays busy), for as long as ctx
// allows; then the busy error is returned, saying how long it was tried.
func (c *Client) request(ctx context.Context, subject string, req any) (*nats.Msg, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	start := time.Now()
	for attempt := 1; ; attempt++ {
		msg, err := c.requestOnce(ctx, subject, data)
		var e *Error
		if !errors.As(err, &e) || e.Code != wire.CodeBusy {
			return msg, err
		}
		wait := busyWait(e.RetryAfter, attempt)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			e.Message = fmt.Sprintf("%s (gave up after %d attempts in %s)", e.Message, attempt, time.Since(start).Round(time.Millisecond))
			return nil, e
		}
		select {
		case <-ctx.Done():
			e.Message = fmt.Sprintf("%s (gave up after %d attempts in %s)", e.Message, attempt, time.Since(start).Round(time.Millisecond))
			return nil, e
		case <-time.After(wait):
		}
	}
}

// busyWait is how long to wait before the attempt after a busy reply: the daemon's hint (100 ms
// without one), doubled for each busy reply in a row up to 16 times and at most 5 s, with jitter of
// ±50% so that clients refused together do not come back together.
func busyWait(hint time.Duration, attempt int) time.Duration {
	if hint <= 0 {
		hint = 100 * time.Millisecond
	}
	base := min(hint<<min(attempt-1, 4), 5*time.Second)
	return base/2 + rand.N(base)
}

// requestOnce sends the request once.
func (c *Client) requestOnce(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		e := unavailable("no checkpointd is answering on %s (is the daemon running? If it runs with --tenants, "+
			"a login reaches only its own namespace)", subject).(*Error)
		e.Cause = nats.ErrNoResponders // a daemon without this operation answers so too (Fork falls back)
		return nil, e
	case errors.Is(err, context.DeadlineExceeded):
		return nil, unavailable("no reply from checkpointd on %s in time", subject)
	case err != nil:
		return nil, unavailable("request on %s: %v", subject, err)
	}
	if msg.Header.Get(wire.HdrServiceErrorCode) != "" {
		var we wire.Error
		if json.Unmarshal(msg.Data, &we) != nil || we.Code == "" {
			we = wire.Error{Code: wire.CodeInternal, Message: msg.Header.Get(wire.HdrServiceError)}
		}
		return nil, fromWire(&we)
	}
	return msg, nil
}
