package transfer_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The cluster harness: a 3-node JetStream cluster whose nodes are processes, two daemons, and
// writers of every kind saving continuously (whole arrays, appends, compare-and-swap writers
// sharing a session, lease holders taking a session from each other, large saves in pieces) while
// the node leading one stream after another is killed with SIGKILL and restarted. Afterwards every
// acknowledged checkpoint must restore with the hash its save returned, each session's history
// must be 1..N with every version acknowledged to exactly one save, and every refusal must be one
// the workload meant (a conflict, a fenced lease). A save whose outcome does not arrive within the
// SDK's default deadline fails the test: the outcome must be found within seconds of the election,
// whichever stream lost its leader.
//
// The short run is part of the suite; CHECKPOINTD_HARNESS_LONG=1 kills every target three times;
// CHECKPOINTD_HARNESS_TARGETS=consumer,CP_RESULTS,... chooses the kills.

// killTargets are the things whose leader a round kills: the streams (CP_LOG holds every session), the
// ingest consumer, the meta leader, and (any) a node that may lead nothing.
var killTargets = []string{
	wire.StreamResults, "consumer", edge.LogStream, wire.StreamIngest, wire.StreamChunks,
	"meta", "any",
}

// harnessConfig is one run's plan.
type harnessConfig struct {
	targets []string      // one kill per entry, in order
	dwell   time.Duration // saving on after the first save acknowledged after a kill, before the restart
	pause   time.Duration // each writer's pause between saves (an agent's turn)
	rotate  int           // versions per session before a writer starts a new one (bounds restore cost)
	bench   *testing.B    // if set, targets[0] is killed once per b.Loop iteration instead
}

func TestCluster_Harness(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cfg := harnessConfig{targets: []string{wire.StreamResults, "consumer", edge.LogStream},
		dwell: 500 * time.Millisecond, pause: 100 * time.Millisecond, rotate: 60}
	if os.Getenv("CHECKPOINTD_HARNESS_LONG") != "" {
		cfg.targets = nil
		for range 3 {
			cfg.targets = append(cfg.targets, killTargets...)
		}
		cfg.dwell, cfg.pause, cfg.rotate = 2*time.Second, 20*time.Millisecond, 100
	}
	if only := os.Getenv("CHECKPOINTD_HARNESS_TARGETS"); only != "" { // e.g. consumer,consumer,CP_RESULTS
		cfg.targets = strings.Split(only, ",")
	}
	h := runHarness(t, cfg)
	h.report(t)
	h.verify(t)
}

// attempt is one call that saves, as a writer saw it.
type attempt struct {
	key        checkpoint.Key
	start, end time.Time
	err        error
}

// round is one kill.
type round struct {
	target, node string
	led          []string  // what the node led when it was killed
	killed       time.Time // SIGKILL sent
	elected      time.Time // everything it led has a new leader
	firstAck     time.Time // the first save that started after the kill was acknowledged
}

type harness struct {
	t   testing.TB
	cl  *testenv.Cluster
	cfg harnessConfig

	mu       sync.Mutex
	acks     []acked
	attempts []attempt
	refused  map[string]int // intended refusals by code
	rounds   []round
	unwanted []error // refusals and failures the workload did not intend

	stop    atomic.Bool
	stopped atomic.Int64 // unix nanos
	wg      sync.WaitGroup
}

func (h *harness) stoppedAt() time.Time { return time.Unix(0, h.stopped.Load()) }

// runHarness runs the cluster, the writers and the kills of cfg, and returns what happened.
func runHarness(t testing.TB, cfg harnessConfig) *harness {
	h := &harness{t: t, cl: testenv.StartCrashCluster(t, 3), cfg: cfg, refused: map[string]int{}}
	var tweak []func(*transfer.Config) // CHECKPOINTD_TEST_LOG=1 shows the daemons' logs
	if os.Getenv("CHECKPOINTD_TEST_LOG") != "" {
		tweak = append(tweak, func(c *transfer.Config) { c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil)) })
	}
	h.cl.StartDaemon(tweak...)
	h.cl.StartDaemon(tweak...)
	// CP_RESULTS is made by the first result stored (a save off the ingest stream), as in any
	// deployment whose writers ever fall back to the stream; the writers below save by request.
	js, err := jetstream.New(h.cl.Conn())
	require.NoError(t, err)
	storeFirstResult(t, js)
	h.cl.WaitForReplicas()

	for i := range 2 {
		h.writer(func(c *checkpoint.Client) { h.wholeWriter(c, fmt.Sprintf("whole-%d", i)) })
	}
	h.writer(func(c *checkpoint.Client) { h.appendWriter(c, "append") })
	for i := range 2 {
		h.writer(func(c *checkpoint.Client) { h.casWriter(c, checkpoint.Key{Session: "cas"}, fmt.Sprintf("cas-%d", i)) })
	}
	for i := range 2 {
		h.writer(func(c *checkpoint.Client) {
			h.leaseWriter(c, checkpoint.Key{Session: "leased"}, fmt.Sprintf("lease-%d", i))
		})
	}
	h.writer(func(c *checkpoint.Client) { h.largeWriter(c) })

	time.Sleep(time.Second) // saves under way before the first kill
	if cfg.bench != nil {
		for cfg.bench.Loop() {
			h.kill(cfg.targets[0])
		}
	} else {
		for _, target := range cfg.targets {
			h.kill(target)
		}
	}
	h.stopped.Store(time.Now().UnixNano())
	h.stop.Store(true)
	h.wg.Wait()
	return h
}

// writer runs one writer on its own connection until the harness stops.
func (h *harness) writer(run func(*checkpoint.Client)) {
	c := h.cl.Client()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		run(c)
	}()
}

// kill kills the node leading target, waits for the cluster to elect new leaders and for a save to
// succeed, and restarts the node once it has caught up.
func (h *harness) kill(target string) {
	t := h.t
	node := h.leaderOf(target, 10*time.Second)
	if target != "any" {
		for try := 0; ; try++ {
			require.NotEmpty(t, node, "no leader of %s", target)
			h.isolate(node, target)
			if now := h.leaderOf(target, 10*time.Second); now == node || try == 3 {
				break
			} else {
				node = now // it moved meanwhile: isolate where it is now
			}
		}
	}
	r := round{target: target, node: node, led: h.ledBy(node)}
	r.killed = time.Now()
	h.cl.Kill(node)
	r.elected = h.awaitLeaders(r.led)
	require.Eventually(t, func() bool { r.firstAck = h.firstAckSince(r.killed); return !r.firstAck.IsZero() },
		90*time.Second, 10*time.Millisecond, "no save succeeded after %s (leading %v) was killed", node, r.led)
	time.Sleep(h.cfg.dwell)
	h.cl.Restart(node)
	h.cl.WaitForJetStream()
	h.cl.WaitForReplicas()
	h.mu.Lock()
	h.rounds = append(h.rounds, r)
	h.mu.Unlock()
	t.Logf("killed %v at %s: all re-elected after %s, first save acknowledged after %s", r,
		r.killed.Format("15:04:05.000"), r.elected.Sub(r.killed).Round(time.Millisecond), r.firstAck.Sub(r.killed).Round(time.Millisecond))
}

// leaderOf names the node leading target (see killTargets), waiting up to timeout for one.
func (h *harness) leaderOf(target string, timeout time.Duration) string {
	switch target {
	case "consumer":
		return h.cl.ConsumerLeader(wire.StreamIngest, "checkpointd", timeout)
	case "meta":
		return h.cl.MetaLeader(timeout)
	case "any":
		live := h.cl.LiveNodes()
		return live[int(time.Now().UnixNano()%int64(len(live)))]
	}
	return h.cl.StreamLeader(target, timeout)
}

// isolate moves every leadership but target's off node, so that killing it shows what losing
// target's leader alone costs. (The meta leader stays: stepping it down needs the system account.)
func (h *harness) isolate(node, target string) {
	for _, other := range killTargets {
		if other == target || other == "any" || other == "meta" {
			continue
		}
		for try := 0; h.leaderOf(other, 10*time.Second) == node; try++ {
			require.Less(h.t, try, 10, "%s keeps its leader on %s", other, node)
			if other == "consumer" {
				h.cl.StepDown(wire.StreamIngest, "checkpointd", 5*time.Second)
			} else {
				h.cl.StepDown(other, "", 5*time.Second)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	time.Sleep(500 * time.Millisecond) // saves settle on the new leaders
}

// ledBy lists what node leads now (killTargets but "any").
func (h *harness) ledBy(node string) []string {
	var led []string
	for _, target := range killTargets {
		if target != "any" && h.leaderOf(target, 10*time.Second) == node {
			led = append(led, target)
		}
	}
	return led
}

// awaitLeaders waits until each of targets has a leader again and says when that was.
func (h *harness) awaitLeaders(targets []string) time.Time {
	for _, target := range targets {
		require.NotEmpty(h.t, h.leaderOf(target, time.Minute), "no new leader of %s", target)
	}
	return time.Now()
}

// firstAckSince returns when the first save that started after t was acknowledged (zero: none yet).
func (h *harness) firstAckSince(t time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var first time.Time
	for _, a := range h.attempts {
		if a.err == nil && a.start.After(t) && (first.IsZero() || a.end.Before(first)) {
			first = a.end
		}
	}
	return first
}

// saveTimeout is each save's deadline: the SDK's default, several times the longest election.
const saveTimeout = 30 * time.Second

// save runs one save and records it: acknowledged, refused as intended (allowed codes) or not.
// It returns the outcome, and whether the writer should try the same save again (its outcome was
// unavailable, which the harness also records as unwanted).
func (h *harness) save(key checkpoint.Key, conv []byte, do func(context.Context) (checkpoint.Version, error), allowed ...error) (checkpoint.Version, error, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), saveTimeout)
	defer cancel()
	start := time.Now()
	v, err := do(ctx)
	end := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempts = append(h.attempts, attempt{key, start, end, err})
	switch {
	case err == nil:
		h.acks = append(h.acks, acked{key, v.Version, v.Hash, conv})
		return v, nil, false
	case errors.Is(err, checkpoint.ErrUnavailable):
		h.unwanted = append(h.unwanted, fmt.Errorf("%s: save unavailable after %s (sent %s): %w", key.Session, end.Sub(start).Round(time.Millisecond), start.Format("15:04:05.000"), err))
		// Saved or not, the writer does not know: it tries the same save again, until a while
		// after the run has stopped (then the cluster is not coming back).
		return v, err, !h.stop.Load() || time.Since(h.stoppedAt()) < time.Minute
	}
	for _, a := range allowed {
		if errors.Is(err, a) {
			var ce *checkpoint.Error
			if errors.As(err, &ce) {
				h.refused[ce.Code]++
			}
			return v, err, false
		}
	}
	// When it was sent and how long it took place it among the kills (the rounds' log lines).
	h.unwanted = append(h.unwanted, fmt.Errorf("%s: unintended refusal (sent %s, took %s): %w", key.Session,
		start.Format("15:04:05.000"), end.Sub(start).Round(time.Millisecond), err))
	return v, err, false
}

// read retries a read (a restore, a lease) that was unavailable (an election, a loaded machine's
// storage timeouts) for up to three minutes: reads are not what is measured.
func read[T any](do func(context.Context) (T, error)) (T, error) {
	give := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), saveTimeout)
		v, err := do(ctx)
		cancel()
		if err == nil || !errors.Is(err, checkpoint.ErrUnavailable) || time.Now().After(give) {
			return v, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// session is a writer's current session, replaced by a new one every cfg.rotate versions.
func (h *harness) session(name string, gen int) checkpoint.Key {
	return checkpoint.Key{Session: fmt.Sprintf("%s-%d", name, gen)}
}

// wholeWriter saves its whole growing conversation each turn (the SDK sends what grew).
func (h *harness) wholeWriter(c *checkpoint.Client, name string) {
	for gen := 0; !h.stop.Load(); gen++ {
		key, conv := h.session(name, gen), []byte("[]")
		for n := 0; n < h.cfg.rotate && !h.stop.Load(); n++ {
			next, id := turn(conv, name, n), nuid.Next()
			for {
				_, err, again := h.save(key, next, func(ctx context.Context) (checkpoint.Version, error) {
					return c.Save(ctx, key, next, checkpoint.WithSaveID(id))
				})
				if err == nil {
					conv = next
				}
				if !again {
					break
				}
			}
			time.Sleep(h.cfg.pause)
		}
	}
}

// appendWriter sends only each turn's new message, on top of the version it last saved.
func (h *harness) appendWriter(c *checkpoint.Client, name string) {
	for gen := 0; !h.stop.Load(); gen++ {
		key, conv, base := h.session(name, gen), []byte("[]"), uint64(0)
		for n := 0; n < h.cfg.rotate && !h.stop.Load(); n++ {
			msg, id := turn(nil, name, n), nuid.Next()
			next := turn(conv, name, n)
			for {
				v, err, again := h.save(key, next, func(ctx context.Context) (checkpoint.Version, error) {
					return c.Append(ctx, key, base, msg, checkpoint.WithSaveID(id))
				})
				if err == nil {
					conv, base = next, v.Version
				}
				if !again {
					break
				}
			}
			time.Sleep(h.cfg.pause)
		}
	}
}

// casWriter replaces a shared session's conversation, expecting the head it last saw: a writer
// that lost the race is refused with a conflict naming the head, and tries again from there.
func (h *harness) casWriter(c *checkpoint.Client, key checkpoint.Key, name string) {
	head := uint64(0)
	for n := 0; !h.stop.Load(); n++ {
		conv, id := turn(nil, name, n), nuid.Next()
		for {
			v, err, again := h.save(key, conv, func(ctx context.Context) (checkpoint.Version, error) {
				return c.Save(ctx, key, conv, checkpoint.ExpectVersion(head), checkpoint.WithSaveID(id))
			}, checkpoint.ErrConflict)
			var ce *checkpoint.Error
			switch {
			case err == nil:
				head = v.Version
			case errors.As(err, &ce) && errors.Is(err, checkpoint.ErrConflict):
				head = ce.Head
			}
			if !again {
				break
			}
		}
		time.Sleep(h.cfg.pause)
	}
}

// leaseWriter resumes a session it shares with another, taking the lease by force, and saves a
// few turns until the other takes it back: its late saves are then fenced.
func (h *harness) leaseWriter(c *checkpoint.Client, key checkpoint.Key, name string) {
	for n := 0; !h.stop.Load(); {
		var conv []byte
		lease, err := read(func(ctx context.Context) (*checkpoint.Lease, error) {
			var l *checkpoint.Lease
			var err error
			conv, _, l, err = c.Resume(ctx, key, checkpoint.WithForce(), checkpoint.WithOwner(name), checkpoint.WithoutRenewal())
			return l, err
		})
		if err != nil {
			h.mu.Lock()
			h.unwanted = append(h.unwanted, fmt.Errorf("%s: resume (given up at %s): %w", name, time.Now().Format("15:04:05.000"), err))
			h.mu.Unlock()
			return
		}
		fenced := false
		for i := 0; i < 5 && !fenced && !h.stop.Load(); i, n = i+1, n+1 {
			next, id := turn(conv, name, n), nuid.Next()
			for {
				_, err, again := h.save(key, next, func(ctx context.Context) (checkpoint.Version, error) {
					return lease.Save(ctx, next, checkpoint.WithSaveID(id))
				}, checkpoint.ErrFenced)
				if err == nil {
					conv = next
				}
				fenced = errors.Is(err, checkpoint.ErrFenced)
				if !again {
					break
				}
			}
			time.Sleep(h.cfg.pause)
		}
	}
}

// largeWriter saves, every couple of seconds, a conversation too large for one NATS message, so
// that it travels in pieces through CP_CHUNKS.
func (h *harness) largeWriter(c *checkpoint.Client) {
	for n := 0; !h.stop.Load(); n++ {
		key, id := checkpoint.Key{Session: fmt.Sprintf("large-%d", n)}, nuid.Next()
		conv := largeConversation(1600 << 10)
		for {
			_, _, again := h.save(key, conv, func(ctx context.Context) (checkpoint.Version, error) {
				return c.Save(ctx, key, conv, checkpoint.WithSaveID(id))
			})
			if !again {
				break
			}
		}
		time.Sleep(2 * time.Second)
	}
}

// largeConversation is one user message of about size bytes of text that does not compress much.
func largeConversation(size int) []byte {
	raw := make([]byte, size*3/4)
	_, _ = rand.Read(raw)
	return []byte(`[{"role":"user","content":"` + base64.StdEncoding.EncodeToString(raw) + `"}]`)
}

// verify checks the outcome of the run (see the top of the file).
func (h *harness) verify(t *testing.T) {
	for _, err := range h.unwanted {
		t.Error(err)
	}
	c := h.cl.Client()
	byKey := map[checkpoint.Key][]acked{}
	for _, a := range h.acks {
		byKey[a.key] = append(byKey[a.key], a)
	}
	for key, acks := range byKey {
		hist, err := read(func(ctx context.Context) ([]checkpoint.Version, error) { return c.History(ctx, key) })
		require.NoError(t, err, key.Session)
		hashes := map[uint64]string{}
		for i, v := range hist {
			require.Equal(t, uint64(i+1), v.Version, "%s: versions 1..N, none skipped, repeated or renumbered", key.Session)
			hashes[v.Version] = v.Hash
		}
		seen := map[uint64]bool{}
		for _, a := range acks {
			require.False(t, seen[a.version], "%s: version %d acknowledged to two saves", key.Session, a.version)
			seen[a.version] = true
			require.Equal(t, a.hash, hashes[a.version], "%s: version %d holds what was acknowledged", key.Session, a.version)
		}
		require.Len(t, seen, len(hist), "%s: every stored version was acknowledged to one save (no phantom version)", key.Session)
	}
	// Every acknowledged checkpoint restores, with its hash and its bytes.
	work := make(chan acked)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range work {
				var got []byte
				v, err := read(func(ctx context.Context) (checkpoint.Version, error) {
					var v checkpoint.Version
					var err error
					got, v, err = c.Restore(ctx, a.key, a.version)
					return v, err
				})
				if !assertNoError(t, err, "%s version %d", a.key.Session, a.version) {
					continue
				}
				if v.Hash != a.hash || string(got) != string(a.conv) {
					t.Errorf("%s version %d: restored %s (%d bytes), acknowledged %s (%d bytes)", a.key.Session, a.version, v.Hash, len(got), a.hash, len(a.conv))
				}
			}
		}()
	}
	for _, a := range h.acks {
		work <- a
	}
	close(work)
	wg.Wait()
}

func assertNoError(t *testing.T, err error, format string, args ...any) bool {
	if err != nil {
		t.Errorf(format+": %v", append(args, err)...)
		return false
	}
	return true
}

// report logs the run's figures: kills, saves, and per target how long saves stalled.
func (h *harness) report(t testing.TB) {
	failed := 0
	for _, a := range h.attempts {
		if a.err != nil {
			failed++
		}
	}
	t.Logf("%d kills; %d saves acknowledged in %d sessions; %d attempts refused (intended: %v); %d unwanted",
		len(h.rounds), len(h.acks), len(h.sessions()), failed, h.refused, len(h.unwanted))
	slow := slices.Clone(h.attempts)
	sort.Slice(slow, func(i, j int) bool { return slow[i].end.Sub(slow[i].start) > slow[j].end.Sub(slow[j].start) })
	for _, a := range slow[:min(5, len(slow))] {
		t.Logf("slow save: %s took %s, from %s, err %v", a.key.Session, a.end.Sub(a.start).Round(time.Millisecond), a.start.Format("15:04:05.000"), a.err)
	}
	for _, s := range h.figures() {
		t.Logf("%-16s kills %d  kill→elected p50 %5dms max %5dms  kill→first ack p50 %5dms max %5dms  elected→first ack max %5dms  longest save in flight %5dms",
			s.target, s.kills, s.elected.p50(), s.elected.max(), s.recovery.p50(), s.recovery.max(), s.afterElection.max(), s.longest.max())
	}
}

func (h *harness) sessions() map[checkpoint.Key]bool {
	keys := map[checkpoint.Key]bool{}
	for _, a := range h.acks {
		keys[a.key] = true
	}
	return keys
}

// durations is a list of figures in milliseconds.
type durations []time.Duration

func (d durations) sorted() durations {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s
}
func (d durations) p50() int64 {
	if len(d) == 0 {
		return 0
	}
	return d.sorted()[len(d)/2].Milliseconds()
}
func (d durations) max() int64 {
	if len(d) == 0 {
		return 0
	}
	return d.sorted()[len(d)-1].Milliseconds()
}

// targetFigures are one target's figures over its kills.
type targetFigures struct {
	target                                    string
	kills                                     int
	elected, recovery, afterElection, longest durations
}

// figures summarises the rounds by target: kill to election, kill to the first acknowledged save
// started after it, election to that save, and the longest save in flight during the round.
func (h *harness) figures() []*targetFigures {
	var out []*targetFigures
	by := map[string]*targetFigures{}
	for _, r := range h.rounds {
		f := by[r.target]
		if f == nil {
			f = &targetFigures{target: r.target}
			by[r.target] = f
			out = append(out, f)
		}
		f.kills++
		f.elected = append(f.elected, r.elected.Sub(r.killed))
		f.recovery = append(f.recovery, r.firstAck.Sub(r.killed))
		f.afterElection = append(f.afterElection, max(0, r.firstAck.Sub(r.elected)))
		var longest time.Duration
		for _, a := range h.attempts {
			if a.end.After(r.killed) && a.start.Before(r.firstAck) {
				longest = max(longest, a.end.Sub(a.start))
			}
		}
		f.longest = append(f.longest, longest)
	}
	return out
}

// String names a round for logs.
func (r round) String() string {
	return fmt.Sprintf("%s on %s (led %s)", r.target, r.node, strings.Join(r.led, ","))
}

// BenchmarkCluster_CrashFailover measures, for each kind of leader, how long saves stall when the
// node leading it (and nothing else) is killed with SIGKILL under the harness's workload: from the
// kill to the election of a successor, from the kill to the first acknowledged save started after
// it, and the longest save in flight meanwhile. b.N kills per target (-benchtime Nx), on a fresh
// cluster per target.
//
//	go test -run XXX -bench Cluster_CrashFailover -benchtime 3x ./internal/transfer/
func BenchmarkCluster_CrashFailover(b *testing.B) {
	for _, target := range killTargets {
		b.Run(target, func(b *testing.B) {
			h := runHarness(b, harnessConfig{targets: []string{target}, dwell: time.Second, pause: 20 * time.Millisecond, rotate: 100, bench: b})
			require.Empty(b, h.unwanted)
			f := h.figures()[0]
			b.ReportMetric(float64(f.elected.p50()), "ms-elected-p50")
			b.ReportMetric(float64(f.recovery.p50()), "ms-first-ack-p50")
			b.ReportMetric(float64(f.recovery.max()), "ms-first-ack-max")
			b.ReportMetric(float64(f.afterElection.max()), "ms-after-election-max")
			b.ReportMetric(float64(f.longest.max()), "ms-longest-save")
			b.ReportMetric(0, "ns/op")
		})
	}
}
