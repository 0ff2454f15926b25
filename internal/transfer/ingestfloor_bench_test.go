package transfer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// BenchmarkIngest_Floor is what 50 agents saving by request and reply could reach on this machine
// at best, whatever the daemon does, against the raw async publish of issue 12's ingest row
// (docs/format.md §8.15l). No checkpointd code runs: each phase has 50 agents, each on its own
// connection, sending 2 small messages per save (the bytes of BenchmarkIngest_FiftyAgents) for
// the phase, to a responder on one connection of its own, as the daemon's, answering with a reply
// of a save result's size from worker goroutines, as the daemon's:
//
//   - echo: request and reply, the responder answering at once (the floor of any save that is a
//     request answered by a process: two hops each way); also with the responder connected in
//     process (nats.InProcessServer), as cmd/checkpointd connects (testenv's daemon uses TCP);
//   - publish: the responder first publishes the body to a stream and waits for its ack (one
//     durable write per save: the floor of today's save);
//   - pipelined: as publish, but each agent keeps 8 saves in flight and the responder answers each
//     once its publish is acknowledged (an SDK whose appends return futures);
//   - grouped: each request carries 8 saves, published as one message (group commit: several
//     saves of a session in one request and one entry);
//   - atomic: each request carries 8 saves, published as 8 messages in one JetStream atomic batch
//     whose first carries the compare-and-swap (Nats-Expected-Last-Subject-Sequence) and whose
//     last commits it (group commit keeping an entry per save);
//   - async and sync publish of the same bytes by the agents, without a responder.
//
// CP_BENCH_SECONDS sets the phase (default 3). It prints saves/s, CPU per save (the process's:
// agents, responder, server) and the ratio to the async publish, never asserted.
func BenchmarkIngest_Floor(b *testing.B) {
	const agents, window = 50, 8
	phase := 3 * time.Second
	if s, err := strconv.Atoi(os.Getenv("CP_BENCH_SECONDS")); err == nil && s > 0 {
		phase = time.Duration(s) * time.Second
	}
	env := testenv.Start(b)
	ctx := context.Background()
	conns := make([]*nats.Conn, agents)
	streams := make([]jetstream.JetStream, agents)
	for i := range conns {
		conns[i] = env.Conn()
		js, err := jetstream.New(conns[i], jetstream.WithPublishAsyncMaxPending(256))
		require.NoError(b, err)
		streams[i] = js
	}
	for name, subjects := range map[string]string{"BENCH_FLOOR": "bench.floor.>", "BENCH_INGEST": "bench.ingest.>", "BENCH_ATOMIC": "bench.atomic.>"} { // the responder's; the agents' raw publishes
		_, err := streams[0].CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subjects}, Storage: jetstream.FileStorage,
			AllowAtomicPublish: name == "BENCH_ATOMIC"})
		require.NoError(b, err)
	}
	pair := func(agent, n int) []byte {
		return fmt.Appendf(nil, `[{"role":"user","content":"agent %d question %d","timestamp":%d},`+
			`{"role":"assistant","content":[{"type":"text","text":"answer %d"}],"stopReason":"stop","model":"m","provider":"p","usage":{"input":1,"output":1,"totalTokens":2},"timestamp":%d}]`,
			agent, n, 1700000000000+n, n, 1700000000001+n)
	}
	group := func(agent, n int) []byte {
		var g [][]byte
		for k := range window {
			g = append(g, pair(agent, n*window+k))
		}
		return bytes.Join(g, []byte{'\n'})
	}
	r := startFloorResponder(b, env)
	for b.Loop() {
		type result struct {
			name  string
			saves float64
			cpu   time.Duration
		}
		measure := func(name string, flood func() int64) result {
			cpu0, start := processCPU(), time.Now()
			n := flood()
			took, cpu := time.Since(start), processCPU()-cpu0
			return result{name, float64(n) / took.Seconds(), cpu / time.Duration(max(n, 1))}
		}
		results := []result{
			measure("echo: request/reply, answered at once", func() int64 {
				return floodRequests(b, conns, "floor.echo", phase, func(i, n int) []byte { return pair(i, n) })
			}),
			measure("echo, the responder in process", func() int64 {
				return floodRequests(b, conns, "floor.echoin", phase, func(i, n int) []byte { return pair(i, n) })
			}),
			measure("publish: request/reply, one sync publish each", func() int64 {
				return floodRequests(b, conns, "floor.publish", phase, func(i, n int) []byte { return pair(i, n) })
			}),
			measure(fmt.Sprintf("pipelined: %d in flight per agent, one publish each", window), func() int64 {
				return floodPipelined(b, conns, "floor.pipelined", phase, window, func(i, n int) []byte { return pair(i, n) })
			}),
			measure(fmt.Sprintf("grouped: %d saves per request, one publish", window), func() int64 {
				return window * floodRequests(b, conns, "floor.publish", phase, group)
			}),
			measure(fmt.Sprintf("atomic: %d saves per request, one atomic batch", window), func() int64 {
				return window * floodRequests(b, conns, "floor.atomic", phase, group)
			}),
			measure("async publish (issue 12's denominator)", func() int64 {
				_, n := publishFlood50(b, ctx, streams, pair, phase)
				return n
			}),
			measure("sync publish, one after another per agent", func() int64 {
				_, n := syncPublishFlood50(b, ctx, streams, pair, phase)
				return n
			}),
		}
		async := results[6]
		for _, x := range results {
			b.Logf("%-52s %8.0f saves/s  %6.1f µs CPU each  %5.1f %% of async publish (CPU %.1f×)", x.name, x.saves,
				float64(x.cpu)/float64(time.Microsecond), 100*x.saves/async.saves, float64(x.cpu)/float64(async.cpu))
		}
		b.ReportMetric(100*results[0].saves/async.saves, "%_echo")
		b.ReportMetric(100*results[1].saves/async.saves, "%_echo_in_process")
		b.ReportMetric(100*results[2].saves/async.saves, "%_publish")
		b.ReportMetric(100*results[3].saves/async.saves, "%_pipelined")
		b.ReportMetric(100*results[4].saves/async.saves, "%_grouped")
		b.ReportMetric(100*results[5].saves/async.saves, "%_atomic")
	}
	r.stop()
}

// floorReply is about a save result's size (a reply carries the version's record).
var floorReply = bytes.Repeat([]byte("r"), 500)

// floorResponder answers floor.echo at once and floor.publish and floor.pipelined after
// publishing the request's body to BENCH_FLOOR, on one connection and worker goroutines, as the
// daemon does.
type floorResponder struct {
	work chan *nats.Msg
	done chan struct{} // closed by stop: the workers end (a callback still running may send after the unsubscribe)
	wg   sync.WaitGroup
	subs []*nats.Subscription
	stop func() // unsubscribes and waits for the workers
}

func startFloorResponder(b *testing.B, env *testenv.Env) *floorResponder {
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	r := &floorResponder{work: make(chan *nats.Msg, 1024), done: make(chan struct{})}
	batches := &atomicBatches{nc: nc, last: map[string]uint64{}}
	for range 64 {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				var m *nats.Msg
				select {
				case m = <-r.work:
				case <-r.done:
					return
				}
				var err error
				if strings.HasPrefix(m.Subject, "floor.atomic.") {
					err = batches.publish(m)
				} else {
					_, err = js.Publish(context.Background(), "bench.floor.publish", m.Data)
				}
				if err != nil {
					b.Error(err)
				}
				_ = m.Respond(floorReply)
			}
		}()
	}
	echo, err := nc.QueueSubscribe("floor.echo.*", "floor", func(m *nats.Msg) { _ = m.Respond(floorReply) })
	require.NoError(b, err)
	inProcess, err := nats.Connect(embedded.InProcessURL(env.Server), nats.InProcessServer(env.Server))
	require.NoError(b, err)
	b.Cleanup(inProcess.Close)
	echoIn, err := inProcess.QueueSubscribe("floor.echoin.*", "floor", func(m *nats.Msg) { _ = m.Respond(floorReply) })
	require.NoError(b, err)
	publish, err := nc.QueueSubscribe("floor.publish.*", "floor", func(m *nats.Msg) { r.work <- m })
	require.NoError(b, err)
	atomicSub, err := nc.QueueSubscribe("floor.atomic.*", "floor", func(m *nats.Msg) { r.work <- m })
	require.NoError(b, err)
	// Pipelined: published asynchronously as they come, answered in order as their acks come.
	acks := make(chan func(), 4096)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			select {
			case answer := <-acks:
				answer()
			case <-r.done:
				return
			}
		}
	}()
	pipelined, err := nc.QueueSubscribe("floor.pipelined.*", "floor", func(m *nats.Msg) {
		f, err := js.PublishAsync("bench.floor.pipelined", m.Data)
		if err != nil {
			b.Error(err)
			return
		}
		acks <- func() {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Error(err)
			}
			_ = m.Respond(floorReply)
		}
	})
	require.NoError(b, err)
	r.subs = []*nats.Subscription{echo, echoIn, publish, atomicSub, pipelined}
	r.stop = func() {
		for _, s := range r.subs {
			_ = s.Unsubscribe()
		}
		close(r.done)
		r.wg.Wait()
	}
	return r
}

// atomicBatches publishes the saves of a request (lines of its body) to bench.atomic.<agent> as
// one atomic batch, the first message expecting the subject's last sequence as the previous
// batch left it, as a save's entry does.
type atomicBatches struct {
	nc   *nats.Conn
	mu   sync.Mutex
	last map[string]uint64 // subject → its last sequence (each agent's requests come one at a time)
	n    atomic.Int64
}

func (a *atomicBatches) publish(m *nats.Msg) error {
	subject := "bench.atomic." + strings.TrimPrefix(m.Subject, "floor.atomic.")
	saves := bytes.Split(m.Data, []byte{'\n'})
	id := "b" + strconv.FormatInt(a.n.Add(1), 10)
	a.mu.Lock()
	last := a.last[subject]
	a.mu.Unlock()
	for i, data := range saves {
		msg := nats.NewMsg(subject)
		msg.Data = data
		msg.Header.Set("Nats-Batch-Id", id)
		msg.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i == 0 {
			msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
		}
		if i < len(saves)-1 {
			if err := a.nc.PublishMsg(msg); err != nil {
				return err
			}
			continue
		}
		msg.Header.Set("Nats-Batch-Commit", "1")
		resp, err := a.nc.RequestMsg(msg, time.Minute)
		if err != nil {
			return err
		}
		var ack struct {
			Seq   uint64          `json:"seq"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(resp.Data, &ack); err != nil || ack.Error != nil || ack.Seq == 0 {
			return fmt.Errorf("atomic batch %s on %s: %s", id, subject, resp.Data)
		}
		a.mu.Lock()
		a.last[subject] = ack.Seq
		a.mu.Unlock()
	}
	return nil
}

// floodRequests has every agent send requests on <prefix>.<agent> one after another for the
// phase, each waiting for its reply; it returns the replies.
func floodRequests(b *testing.B, conns []*nats.Conn, prefix string, phase time.Duration, body func(agent, n int) []byte) int64 {
	var done atomic.Int64
	deadline := time.Now().Add(phase)
	var wg sync.WaitGroup
	for i, nc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subject := prefix + "." + strconv.Itoa(i)
			for n := 0; time.Now().Before(deadline); n++ {
				if _, err := nc.Request(subject, body(i, n), time.Minute); err != nil {
					b.Error(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return done.Load()
}

// floodPipelined has every agent keep window requests in flight on <prefix>.<agent> for the
// phase, sending the next as each reply comes; it returns the replies (those in flight at the end
// included: each is waited for).
func floodPipelined(b *testing.B, conns []*nats.Conn, prefix string, phase time.Duration, window int, body func(agent, n int) []byte) int64 {
	var done atomic.Int64
	deadline := time.Now().Add(phase)
	var wg sync.WaitGroup
	for i, nc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subject, inbox := prefix+"."+strconv.Itoa(i), nc.NewRespInbox()
			sub, err := nc.SubscribeSync(inbox)
			if err != nil {
				b.Error(err)
				return
			}
			defer func() { _ = sub.Unsubscribe() }()
			sent := 0
			send := func() bool {
				if err := nc.PublishRequest(subject, inbox, body(i, sent)); err != nil {
					b.Error(err)
					return false
				}
				sent++
				return true
			}
			for range window {
				if !send() {
					return
				}
			}
			for got := 0; got < sent; got++ {
				if _, err := sub.NextMsg(time.Minute); err != nil {
					b.Error(err)
					return
				}
				done.Add(1)
				if time.Now().Before(deadline) && !send() {
					return
				}
			}
		}()
	}
	wg.Wait()
	return done.Load()
}
