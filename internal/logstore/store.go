// Package logstore is a prototype of checkpointd's next storage engine (docs/format.md §8): each
// session is one append-only subject of a single JetStream stream, a save is one publish whose
// Nats-Expected-Last-Subject-Sequence is the compare-and-swap, the head is the subject's last
// message (cached here), and messages are one zstd stream per session. Merges are tiered and only
// copy stored bytes; what they supersede is purged by subject. It is not wired into the daemon.
package logstore

import (
	"context"
	"encoding/json"
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
	// MergeFactor is how many extents of one level a merge joins into one of the next level
	// (default 8). Negative: never merge.
	MergeFactor int
	// Window is the zstd window of a session's stream (default 1 MiB): more compresses better,
	// and costs the daemon that much memory per cached session, and readers per read.
	Window int
	// LeaderReads makes head reads go to the stream leader (STREAM.MSG.GET), as a cluster needs
	// for read-your-writes; default: direct get.
	LeaderReads bool
}

func (c Config) withDefaults() Config {
	if c.Stream == "" {
		c.Stream = "CP_LOG"
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.MergeFactor == 0 {
		c.MergeFactor = 8
	}
	if c.Window == 0 {
		c.Window = 1 << 20
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
	return &Store{nc: nc, js: js, stream: st, cfg: cfg, sessions: map[string]*session{}}, nil
}

// StreamConfig is the log stream: file storage, direct gets, nothing expires by itself (the
// engine deletes what it supersedes), and a per-subject compare-and-swap on every log write.
func StreamConfig(cfg Config) jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	return jetstream.StreamConfig{
		Name:        cfg.Stream,
		Subjects:    []string{"cp.log.>", "cp.dat.>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		Replicas:    cfg.Replicas,
		AllowDirect: true,
	}
}

// LogSubject is the subject of key's log: every save, merge commit, lease and fork entry.
func LogSubject(k wire.Key) string { return "cp.log." + k.Token() }

// DataSubject is the subject of key's merged data of one level (1, 2, …).
func DataSubject(k wire.Key, level int) string {
	return "cp.dat." + k.Token() + "." + strconv.Itoa(level)
}

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

// getMany fetches the messages at seqs with direct gets sent all at once (pipelined), so a read
// of k extents costs about one round trip, on every server version.
func (s *Store) getMany(ctx context.Context, seqs []uint64) ([][]byte, error) {
	out := make([][]byte, len(seqs))
	if len(seqs) == 0 {
		return out, nil
	}
	inbox := s.nc.NewRespInbox()
	ch := make(chan *nats.Msg, len(seqs))
	sub, err := s.nc.ChanSubscribe(inbox+".*", ch)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	subject := "$JS.API.DIRECT.GET." + s.cfg.Stream
	for i, seq := range seqs {
		if err := s.nc.PublishRequest(subject, inbox+"."+strconv.Itoa(i), []byte(`{"seq":`+strconv.FormatUint(seq, 10)+`}`)); err != nil {
			return nil, err
		}
	}
	for got := 0; got < len(seqs); got++ {
		select {
		case m := <-ch:
			i, err := strconv.Atoi(m.Subject[len(inbox)+1:])
			if err != nil || i < 0 || i >= len(seqs) {
				return nil, fmt.Errorf("logstore: direct get reply on %s", m.Subject)
			}
			data, seq, err := directReply(m, "seq "+strconv.FormatUint(seqs[i], 10))
			if err == nil && seq != seqs[i] {
				err = fmt.Errorf("%w: asked seq %d, got %d", ErrMalformed, seqs[i], seq)
			}
			if err != nil {
				return nil, fmt.Errorf("entry %d: %w", seqs[i], err)
			}
			out[i] = data
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// purge removes every message on subject with a sequence below before (JetStream purge with a
// subject filter and a sequence, nats-server ≥ 2.8; it writes no delete markers).
func (s *Store) purge(ctx context.Context, subject string, before uint64) error {
	err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(before))
	if err != nil {
		return fmt.Errorf("logstore: purging %s below %d: %w", subject, before, err)
	}
	return nil
}

func nowMillis() int64 { return time.Now().UnixMilli() }

// jsonString is a small helper for errors naming a value.
func jsonString(v any) string { b, _ := json.Marshal(v); return string(b) }
