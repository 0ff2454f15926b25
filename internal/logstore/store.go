// Package logstore is a prototype of checkpointd's next storage engine (docs/format.md §8): each
// session is one append-only subject of a single JetStream stream, a save is one publish whose
// Nats-Expected-Last-Subject-Sequence is the compare-and-swap, the head is the subject's last
// message (cached here), a session's messages are one zstd stream cut at every save, and a read
// fetches the subject's entries with one batched direct get. Packs join the saves since the last
// pack into one entry (each byte is written at most twice); nothing else is ever rewritten. It is
// not wired into the daemon.
package logstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Config tunes a Store. The zero value of each field picks its default.
type Config struct {
	Stream   string // the stream's name; default "CP_LOG"
	Replicas int    // default 1
	// Window is the zstd window of a session's stream (default 1 MiB): more compresses better,
	// and costs the daemon that much memory per cached session, and readers per read.
	Window int
	// LeaderReads makes head reads go to the stream leader (STREAM.MSG.GET), as a cluster needs
	// for read-your-writes; default: direct get.
	LeaderReads bool
	// PackBytes and PackEntries: the saves since the last pack are packed into one entry once
	// their data reaches PackBytes (default 64 KiB) or they are PackEntries (default 64).
	// NoPack: never (each save stays an entry of its own).
	PackBytes   int64
	PackEntries int
	NoPack      bool
	// PackOpen makes packs keep the saves' stored bytes as they are (no decoding, no new
	// frame: the saves after a pack go on compressing against it) instead of compressing them
	// again as one frame (which decodes faster, and ends the session's frame).
	PackOpen bool
	// FastSaves compresses each save at zstd.SpeedFastest instead of the default level: ~25%
	// less CPU on a save (the largest CPU cost of a save, docs/format.md §8.15a) for a stream ~8%
	// larger. Packs are compressed at the default level all the same.
	FastSaves bool
	// NoVerify skips the check of a restored version against its SHA-256 (2.3 MB: 1–2 ms here);
	// every piece's CRC-32C and the version's size are checked all the same.
	NoVerify bool
}

func (c Config) withDefaults() Config {
	if c.Stream == "" {
		c.Stream = "CP_LOG"
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Window == 0 {
		c.Window = 1 << 20
	}
	if c.PackBytes == 0 {
		c.PackBytes = 64 << 10
	}
	if c.PackEntries == 0 {
		c.PackEntries = 64
	}
	return c
}

// Errors a caller tells apart with errors.Is.
var (
	ErrNotFound = errors.New("logstore: not found")
	ErrConflict = errors.New("logstore: the session moved on (compare-and-swap lost)")
	ErrFenced   = errors.New("logstore: fenced: the lease is held by another owner or epoch")
)

// Store is the engine over one stream. Safe for concurrent use; saves of one session are
// serialised by the session's lock.
type Store struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	cfg    Config

	batch bool // the server answers batched direct gets (nats-server ≥ 2.11)
	// crashBeforeDeletes makes packs stop after their commit, as a crash would (tests).
	crashBeforeDeletes bool

	mu       sync.Mutex
	sessions map[string]*session // by log subject
}

// Open creates (or updates) the stream and returns a Store on it.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st, err := js.CreateOrUpdateStream(ctx, StreamConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("logstore: creating stream %s: %w", cfg.Stream, err)
	}
	return &Store{nc: nc, js: js, stream: st, cfg: cfg, batch: serverAtLeast(nc, 2, 11), sessions: map[string]*session{}}, nil
}

// StreamConfig is the log stream: file storage, direct gets, nothing expires by itself, and a
// per-subject compare-and-swap on every write.
func StreamConfig(cfg Config) jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	return jetstream.StreamConfig{
		Name:        cfg.Stream,
		Subjects:    []string{"cp.log.>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		Replicas:    cfg.Replicas,
		AllowDirect: true,
	}
}

// LogSubject is the subject of key's log: its saves, leases and fork entry.
func LogSubject(k wire.Key) string { return "cp.log." + k.Token() }

// publish writes an entry; expect ≥ 0 makes it a compare-and-swap on the subject's last
// sequence (0: the subject must be empty). It returns the entry's stream sequence.
func (s *Store) publish(ctx context.Context, subject string, body []byte, expect int64) (uint64, error) {
	var opts []jetstream.PublishOpt
	if expect >= 0 {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(uint64(expect)))
	}
	ack, err := s.js.Publish(ctx, subject, body, opts...)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return 0, fmt.Errorf("%w: %s", ErrConflict, subject)
	}
	if err != nil {
		return 0, fmt.Errorf("logstore: publishing to %s: %w", subject, err)
	}
	return ack.Sequence, nil
}

// getLast returns the last message on subject and its sequence (ErrNotFound if none).
func (s *Store) getLast(ctx context.Context, subject string) ([]byte, uint64, error) {
	if s.cfg.LeaderReads {
		m, err := s.stream.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, 0, ErrNotFound
		}
		if err != nil {
			return nil, 0, err
		}
		return m.Data, m.Sequence, nil
	}
	return s.directGet(ctx, `{"last_by_subj":`+strconv.Quote(subject)+`}`)
}

// directGet asks any replica for one message ($JS.API.DIRECT.GET, nats-server ≥ 2.9.0).
func (s *Store) directGet(ctx context.Context, req string) ([]byte, uint64, error) {
	m, err := s.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+s.cfg.Stream, []byte(req))
	if err != nil {
		return nil, 0, fmt.Errorf("logstore: direct get %s: %w", req, err)
	}
	return directReply(m, req)
}

// directReply reads a direct get's reply: the message, or a status (404: not found).
func directReply(m *nats.Msg, req string) ([]byte, uint64, error) {
	if st := m.Header.Get("Status"); st != "" {
		if st == "404" {
			return nil, 0, ErrNotFound
		}
		return nil, 0, fmt.Errorf("logstore: direct get %s: status %s %s", req, st, m.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("logstore: direct get %s: bad Nats-Sequence %q", req, m.Header.Get("Nats-Sequence"))
	}
	return m.Data, seq, nil
}

// entry is one message of a log subject, decoded.
type entry struct {
	seq  uint64
	kind Kind
	meta Meta
	data []byte
}

// readLog returns subject's entries in order, from the first up to sequence upTo (inclusive),
// stopping after the first entry for which stop returns true (stop may be nil). On nats-server
// ≥ 2.11 it asks for them in batches (one request, the entries in reply: want of them in the
// first, 0 meaning all, and up to 8 MiB a batch); on older servers one direct get per entry
// (next_by_subj).
func (s *Store) readLog(ctx context.Context, subject string, upTo uint64, want int, stop func(entry) bool) ([]entry, error) {
	return s.readLogFrom(ctx, subject, 1, upTo, want, stop)
}

// readLogFrom is readLog from sequence from on.
func (s *Store) readLogFrom(ctx context.Context, subject string, from, upTo uint64, want int, stop func(entry) bool) ([]entry, error) {
	var out []entry
	for from <= upTo {
		page, more, err := s.readPage(ctx, subject, from, want)
		want = 0
		if err != nil {
			return nil, err
		}
		for _, m := range page {
			if m.seq > upTo {
				return out, nil
			}
			out = append(out, m)
			if stop != nil && stop(m) {
				return out, nil
			}
			from = m.seq + 1
		}
		if !more {
			break
		}
	}
	if len(out) == 0 || out[len(out)-1].seq != upTo {
		// A replica behind the leader, or an entry gone: the caller reads the head again.
		return nil, fmt.Errorf("%w: %s read up to seq %d, not %d", ErrNotFound, subject, lastSeqOf(out), upTo)
	}
	return out, nil
}

func lastSeqOf(es []entry) uint64 {
	if len(es) == 0 {
		return 0
	}
	return es[len(es)-1].seq
}

// readPage returns up to batch entries (0: as many as 8 MiB holds) of subject from sequence from
// on, and whether there are more.
func (s *Store) readPage(ctx context.Context, subject string, from uint64, batch int) ([]entry, bool, error) {
	if batch <= 0 {
		batch = 1 << 20
	}
	req := `{"seq":` + strconv.FormatUint(from, 10) + `,"next_by_subj":` + strconv.Quote(subject)
	if !s.batch {
		body, seq, err := s.directGet(ctx, req+`}`)
		if errors.Is(err, ErrNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		e, err := decodeAt(subject, seq, body)
		return []entry{e}, true, err
	}
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	err = s.nc.PublishRequest("$JS.API.DIRECT.GET."+s.cfg.Stream, inbox, []byte(req+`,"batch":`+strconv.Itoa(batch)+`,"max_bytes":8388608}`))
	if err != nil {
		return nil, false, err
	}
	var out []entry
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("logstore: reading %s: %w", subject, err)
		}
		switch m.Header.Get("Status") {
		case "204": // end of the batch
			return out, m.Header.Get("Nats-Num-Pending") != "0", nil
		case "404":
			return out, false, nil
		}
		body, seq, err := directReply(m, req)
		if err != nil {
			return nil, false, err
		}
		e, err := decodeAt(subject, seq, body)
		if err != nil {
			return nil, false, err
		}
		out = append(out, e)
	}
}

func decodeAt(subject string, seq uint64, body []byte) (entry, error) {
	k, meta, data, err := decodeEntry(body)
	if err != nil {
		return entry{}, fmt.Errorf("%s seq %d: %w", subject, seq, err)
	}
	return entry{seq: seq, kind: k, meta: meta, data: data}, nil
}

// serverAtLeast reports whether the connected server's version is at least major.minor.
func serverAtLeast(nc *nats.Conn, major, minor int) bool {
	var ma, mi, pa int
	if _, err := fmt.Sscanf(nc.ConnectedServerVersion(), "%d.%d.%d", &ma, &mi, &pa); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

func nowMillis() int64 { return time.Now().UnixMilli() }
