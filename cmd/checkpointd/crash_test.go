package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The crash harness: checkpointd runs as a real process that is SIGKILLed at random moments and
// started again on the same data directory and ports, while writers in this process save through
// the SDK: whole arrays of growing conversations, appends, and saves under leases. A save whose
// outcome a kill hid (unavailable, a timeout) is retried with the same save id until it has one,
// which must be the version the first attempt made. At the end every acknowledged checkpoint must
// restore with its hash, and every session's history must be exactly its acknowledged saves:
// numbered 1, 2, 3, ... with no version duplicated, skipped, renumbered or unaccounted for.
//
// CI runs a few kills; CHECKPOINTD_HARNESS_KILLS=200 runs a long one. CHECKPOINTD_HARNESS_SEED
// replays the kill schedule of a failed run (the seed is logged; the writers' interleaving with it
// is up to the scheduler).
func TestCrashHarness_SIGKILLLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs checkpointd as a process and kills it repeatedly")
	}
	kills := envInt(t, "CHECKPOINTD_HARNESS_KILLS", 6)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHECKPOINTD_HARNESS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "CHECKPOINTD_HARNESS_SEED")
		seed = n
	}
	t.Logf("crash harness: %d kills, seed %d (replay with CHECKPOINTD_HARNESS_SEED=%d)", kills, seed, seed)

	p := newDaemonProc(t)
	p.start()
	h := &crashHarness{t: t, url: p.url(), corpus: corpusMessages(t), sessions: map[checkpoint.Key]*sessionLog{}}
	kinds := []writerKind{wholeWriter, wholeWriter, appendWriter, appendWriter, leaseWriter, leaseWriter}
	var writers sync.WaitGroup
	stop := make(chan struct{})
	for i, kind := range kinds {
		writers.Add(1)
		go func() {
			defer writers.Done()
			h.runWriter(i, kind, rand.New(rand.NewPCG(seed, uint64(i+1))), stop)
		}()
	}

	rng := rand.New(rand.NewPCG(seed, 0))
	var schedule []string
	for k := 1; k <= kills && !h.failed(); k++ {
		delay := killDelay(rng)
		schedule = append(schedule, delay.String())
		time.Sleep(delay)
		p.kill()
		began := time.Now()
		p.start()
		h.kills.Add(1)
		h.restartTime += time.Since(began)
	}
	time.Sleep(time.Second) // saves after the last restart, too
	close(stop)
	writers.Wait()
	t.Logf("kill delays after each start: %s", strings.Join(schedule, " "))
	if h.failed() {
		t.Fatalf("writers failed: %v\ningest queue: %s\ndaemon logs:\n%s", h.errs(), ingestQueue(p.url()), p.logTail())
	}

	writerRetries := h.retried.Load()
	verified := h.verify(p)
	t.Logf("crash harness: %d kills, %d saves acknowledged (%d whole, %d append, %d leased) in %d sessions, "+
		"%d attempts retried after an unknown outcome, %d resumes, %d versions verified by restore, 0 lost; "+
		"restart to healthy took %v on average",
		h.kills.Load(), h.acked.Load(), h.byKind[wholeWriter].Load(), h.byKind[appendWriter].Load(), h.byKind[leaseWriter].Load(),
		len(h.sessions), writerRetries, h.resumes.Load(), verified, h.restartTime/time.Duration(max(h.kills.Load(), 1)))
	require.Positive(t, writerRetries, "some saves were caught by a kill (else the harness tests nothing)")
}

// killDelay picks how long the daemon runs before the next kill: often within its first moments
// (recovering, redelivering), usually while saves are in full flow.
func killDelay(rng *rand.Rand) time.Duration {
	if rng.IntN(4) == 0 {
		return time.Duration(rng.IntN(300)) * time.Millisecond
	}
	return 300*time.Millisecond + time.Duration(rng.IntN(1700))*time.Millisecond
}

type writerKind int

const (
	wholeWriter  writerKind = iota // Client.Save of the whole, growing array
	appendWriter                   // Client.Append of the new messages onto the head
	leaseWriter                    // Resume, Lease.Save a few turns, Pause; again
)

func (k writerKind) String() string { return [...]string{"whole", "append", "lease"}[k] }

// ack is one acknowledged save.
type ack struct {
	saveID  string
	version uint64
	hash    string
}

// sessionLog is what one writer had acknowledged on one session.
type sessionLog struct {
	key  checkpoint.Key
	acks []ack
}

type crashHarness struct {
	t      *testing.T
	url    string
	corpus [][]json.RawMessage

	mu       sync.Mutex
	sessions map[checkpoint.Key]*sessionLog
	failures []error

	restartTime                    time.Duration // kill to healthy, summed
	kills, acked, retried, resumes atomic.Int64
	byKind                         [3]atomic.Int64
}

func (h *crashHarness) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures = append(h.failures, err)
}

func (h *crashHarness) failed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.failures) > 0
}

func (h *crashHarness) errs() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failures
}

func (h *crashHarness) log(key checkpoint.Key) *sessionLog {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sessions[key]
	if s == nil {
		s = &sessionLog{key: key}
		h.sessions[key] = s
	}
	return s
}

// record checks an acknowledged save against what was sent and what the session had, and keeps it.
func (h *crashHarness) record(kind writerKind, key checkpoint.Key, id string, conv []byte, v checkpoint.Version) error {
	s := h.log(key)
	want := uint64(len(s.acks) + 1)
	if v.Version != want {
		return fmt.Errorf("%s: save %s acknowledged as version %d, but the writer's previous save was version %d", key.Session, id, v.Version, want-1)
	}
	if got := wire.Hash(conv); v.Hash != got {
		return fmt.Errorf("%s: save %s acknowledged as version %d with hash %s, but what was sent hashes to %s", key.Session, id, v.Version, v.Hash, got)
	}
	s.acks = append(s.acks, ack{saveID: id, version: v.Version, hash: v.Hash})
	h.acked.Add(1)
	h.byKind[kind].Add(1)
	return nil
}

// untilKnown runs op until its outcome is known: success, or a refusal other than unavailable or
// busy (which a kill causes). Each attempt has its own deadline; the caller makes every attempt
// carry the same save id, so a retry of a save that was stored yields the version it made.
func (h *crashHarness) untilKnown(what string, op func(ctx context.Context, attempt int) error) error {
	deadline := time.Now().Add(3 * time.Minute)
	for attempt := 1; ; attempt++ {
		// Short attempts: a kill usually leaves a save without its outcome, and the retry with the
		// same save id is what is being tested (longer ones would see the SDK wait the kill out).
		ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
		err := op(ctx, attempt)
		cancel()
		if err == nil || !(errors.Is(err, checkpoint.ErrUnavailable) || errors.Is(err, checkpoint.ErrBusy) || errors.Is(err, context.DeadlineExceeded)) {
			return err
		}
		h.retried.Add(1)
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no outcome after %d attempts over 3 minutes: %w", what, attempt, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const attemptTimeout = 2 * time.Second

func (h *crashHarness) connect() (*checkpoint.Client, error) {
	var c *checkpoint.Client
	err := h.untilKnown("connect", func(context.Context, int) error {
		var err error
		c, err = checkpoint.Connect(h.url, []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond),
			nats.ReconnectJitter(0, 0)}, checkpoint.WithTimeout(15*time.Second))
		return err
	})
	return c, err
}

// runWriter saves session after session until stop is closed; each session's conversation grows
// through the messages of one corpus transcript.
func (h *crashHarness) runWriter(w int, kind writerKind, rng *rand.Rand, stop chan struct{}) {
	c, err := h.connect()
	if err != nil {
		h.fail(err)
		return
	}
	defer c.Close()
	for s := 0; ; s++ {
		select {
		case <-stop:
			return
		default:
		}
		msgs := h.corpus[(w+s)%len(h.corpus)]
		msgs = msgs[:min(len(msgs), 60)]
		key := checkpoint.Key{Namespace: "crash", Session: fmt.Sprintf("w%d-%s-%d", w, kind, s)}
		var err error
		switch kind {
		case wholeWriter:
			err = h.wholeSession(c, key, msgs, rng, stop)
		case appendWriter:
			err = h.appendSession(c, key, msgs, stop)
		case leaseWriter:
			err = h.leaseSession(c, key, msgs, rng, stop)
		}
		if err != nil {
			h.fail(fmt.Errorf("writer %d (%s): %w", w, kind, err))
			return
		}
	}
}

// wholeSession saves the whole array after each turn of one to three messages. Every other save
// is indented, so the client cannot send only the new messages and the daemon compares the array
// message by message; the others are compact and take the SDK's append path.
func (h *crashHarness) wholeSession(c *checkpoint.Client, key checkpoint.Key, msgs []json.RawMessage, rng *rand.Rand, stop chan struct{}) error {
	for n, turn := 1+rng.IntN(3), 0; n <= len(msgs); n, turn = n+1+rng.IntN(3), turn+1 {
		if stopped(stop) {
			return nil
		}
		conv := joinMessages(msgs[:n])
		body := conv
		if turn%2 == 1 {
			body = indented(msgs[:n])
		}
		id := fmt.Sprintf("%s.%d", key.Session, turn)
		var v checkpoint.Version
		err := h.untilKnown("save "+id, func(ctx context.Context, _ int) error {
			var err error
			v, err = c.Save(ctx, key, body, checkpoint.WithSaveID(id))
			return err
		})
		if err != nil {
			return err
		}
		if err := h.record(wholeWriter, key, id, conv, v); err != nil {
			return err
		}
	}
	return nil
}

// appendSession sends only the two messages of each turn, onto the head it last saw.
func (h *crashHarness) appendSession(c *checkpoint.Client, key checkpoint.Key, msgs []json.RawMessage, stop chan struct{}) error {
	var base uint64
	for n, turn := 2, 0; n <= len(msgs); n, turn = n+2, turn+1 {
		if stopped(stop) {
			return nil
		}
		id := fmt.Sprintf("%s.%d", key.Session, turn)
		var v checkpoint.Version
		err := h.untilKnown("append "+id, func(ctx context.Context, _ int) error {
			var err error
			v, err = c.Append(ctx, key, base, joinMessages(msgs[n-2:n]), checkpoint.WithSaveID(id))
			return err
		})
		if err != nil {
			return err
		}
		if err := h.record(appendWriter, key, id, joinMessages(msgs[:n]), v); err != nil {
			return err
		}
		base = v.Version
	}
	return nil
}

// leaseSession resumes the session (acquire and restore the head), saves a few turns under the
// lease, and pauses (a final save, then release), over and over: each resume must find exactly
// the conversation of the last acknowledged save.
func (h *crashHarness) leaseSession(c *checkpoint.Client, key checkpoint.Key, msgs []json.RawMessage, rng *rand.Rand, stop chan struct{}) error {
	n, turn := 0, 0
	for n < len(msgs) && !stopped(stop) {
		var lease *checkpoint.Lease
		var conv []byte
		var head checkpoint.Version
		err := h.untilKnown("resume "+key.Session, func(ctx context.Context, _ int) error {
			var err error
			conv, head, lease, err = c.Resume(ctx, key, checkpoint.WithTTL(time.Minute))
			return err
		})
		if err != nil {
			return err
		}
		h.resumes.Add(1)
		if want := joinMessages(msgs[:n]); string(conv) != string(want) || head.Version != uint64(len(h.log(key).acks)) {
			return fmt.Errorf("%s: resumed version %d (%d bytes), but the last acknowledged save was version %d (%d bytes)",
				key.Session, head.Version, len(conv), len(h.log(key).acks), len(want))
		}
		for saves := 1 + rng.IntN(4); saves > 0 && n < len(msgs); saves-- {
			n = min(n+1+rng.IntN(2), len(msgs))
			last := saves == 1 || n == len(msgs) || stopped(stop)
			opts := []checkpoint.SaveOption{checkpoint.WithSaveID(fmt.Sprintf("%s.%d", key.Session, turn))}
			if last {
				opts = append(opts, checkpoint.WithReason(wire.ReasonPause))
			}
			conv = joinMessages(msgs[:n])
			var v checkpoint.Version
			err := h.untilKnown("leased save", func(ctx context.Context, _ int) error {
				var err error
				v, err = lease.Save(ctx, conv, opts...)
				return err
			})
			if err != nil {
				return err
			}
			if err := h.record(leaseWriter, key, fmt.Sprintf("%s.%d", key.Session, turn), conv, v); err != nil {
				return err
			}
			turn++
			if last {
				break
			}
		}
		// Pause's release. A release whose reply a kill lost answers fenced when retried: the
		// epoch is released already.
		err = h.untilKnown("release "+key.Session, func(ctx context.Context, attempt int) error {
			err := lease.Release(ctx)
			if attempt > 1 && errors.Is(err, checkpoint.ErrFenced) {
				return nil
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// verify reads back, through a fresh client, every session the writers touched: its history must
// be exactly the acknowledged saves, in order, and every version must restore with its hash.
func (h *crashHarness) verify(p *daemonProc) int {
	t := h.t
	c, err := checkpoint.Connect(h.url, nil, checkpoint.WithTimeout(time.Minute))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	verified := 0
	for _, s := range h.sessions {
		if len(s.acks) == 0 {
			continue
		}
		// A save the killed daemon had taken but not acknowledged is offered again only after the
		// ingest consumer's ack wait; reads wait for it and may answer unavailable meanwhile.
		var hist []checkpoint.Version
		err := h.untilKnown("history", func(context.Context, int) error {
			var err error
			hist, err = c.History(ctx, s.key)
			return err
		})
		require.NoError(t, err, "%s\n%s", s.key.Session, p.logTail())
		require.Len(t, hist, len(s.acks), "%s: every stored version was acknowledged, and every acknowledged one is stored", s.key.Session)
		for i, v := range hist {
			a := s.acks[i]
			require.Equal(t, uint64(i+1), v.Version, "%s: history is numbered 1, 2, 3, ...", s.key.Session)
			require.Equal(t, a.saveID, v.SaveID, "%s: version %d was made by save %s", s.key.Session, v.Version, a.saveID)
			require.Equal(t, a.hash, v.Hash, "%s: version %d keeps the hash it was acknowledged with", s.key.Session, v.Version)
			if i > 0 {
				require.Equal(t, hist[i-1].Version, v.Parent, "%s: version %d follows the one before", s.key.Session, v.Version)
			}
			var conv []byte
			var got checkpoint.Version
			err := h.untilKnown("restore", func(context.Context, int) error {
				var err error
				conv, got, err = c.Restore(ctx, s.key, a.version)
				return err
			})
			require.NoError(t, err, "%s: version %d", s.key.Session, a.version)
			require.Equal(t, a.hash, got.Hash)
			require.Equal(t, a.hash, wire.Hash(conv), "%s: version %d restores with its hash", s.key.Session, a.version)
			verified++
		}
	}
	return verified
}

// ingestQueue describes the saves still queued and the ingest consumer's state, for a failure's
// report.
func ingestQueue(url string) string {
	nc, err := nats.Connect(url)
	if err != nil {
		return err.Error()
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, wire.StreamIngest)
	if err != nil {
		return err.Error()
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d saves queued (seq %d..%d)", info.State.Msgs, info.State.FirstSeq, info.State.LastSeq)
	if cons, err := s.Consumer(ctx, "checkpointd"); err == nil {
		ci := cons.CachedInfo()
		fmt.Fprintf(&b, "; consumer: %d ack pending, %d redelivered, %d waiting pulls, delivered %d, ack floor %d",
			ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Delivered.Stream, ci.AckFloor.Stream)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq < info.State.FirstSeq+20; seq++ {
		if m, err := s.GetMsg(ctx, seq); err == nil {
			// A save whose result exists was settled: still queued, it holds up every read of its
			// session for good.
			settled := "no result yet"
			if ns, _, ok := strings.Cut(strings.TrimPrefix(m.Subject, "cp.ingest."), "."); ok {
				if rs, err := js.Stream(ctx, wire.StreamResults); err == nil {
					if nsID, err := wire.DecodeID(ns); err == nil {
						if r, err := rs.GetLastMsgForSubject(ctx, wire.ResultSubject(nsID, m.Header.Get(wire.HdrSaveID))); err == nil {
							settled = "settled: " + string(r.Data[:min(len(r.Data), 160)])
						}
					}
				}
			}
			fmt.Fprintf(&b, "\n  seq %d %s save %s, %d bytes, at %s; %s", seq, m.Subject, m.Header.Get(wire.HdrSaveID), len(m.Data), m.Time.Format(time.StampMilli), settled)
		}
	}
	return b.String()
}

func stopped(stop chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// indented is msgs as an indented JSON array: the same conversation as joinMessages, in bytes no
// earlier save of it started with.
func indented(msgs []json.RawMessage) []byte {
	var b strings.Builder
	b.WriteString("[\n")
	for i, m := range msgs {
		if i > 0 {
			b.WriteString(",\n")
		}
		b.WriteString("  ")
		b.Write(m)
	}
	b.WriteString("\n]")
	return []byte(b.String())
}

func envInt(t testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, name)
	return n
}
