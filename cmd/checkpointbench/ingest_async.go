package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The ingest row issue 12's target is read from: the agents append with AppendAsync, keeping up to
// maxPendingPublishes appends in flight each, as the raw side keeps its asynchronous publishes;
// the client sends a session's appends that queue while one request is in flight as the next
// request (group commit, docs/protocol.md §4.0.1), and each append counts once durable.

// asyncSaveFlood has every agent append pairs with AppendAsync for the phase, at most
// maxPendingPublishes in flight each, then waits for every future; it returns the saves made
// durable and how long they took, waiting included. Each agent starts a new session when its
// conversation's pairs run out (round names the sessions apart from other rounds').
func asyncSaveFlood(ctx context.Context, agents []*conn, conv conversation, phase time.Duration, round int) (int64, time.Duration, error) {
	var done atomic.Int64
	errs := make(chan error, len(agents))
	deadline := time.Now().Add(phase)
	start := time.Now()
	pairs := len(conv.msgs) / 2
	var wg sync.WaitGroup
	for i, c := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var inFlight []*checkpoint.AppendFuture
			wait := func(f *checkpoint.AppendFuture) bool {
				if _, err := f.Wait(ctx); err != nil {
					errs <- err
					return false
				}
				done.Add(1)
				return true
			}
			for n := 0; time.Now().Before(deadline); n++ {
				if len(inFlight) == maxPendingPublishes {
					if !wait(inFlight[0]) {
						return
					}
					inFlight = inFlight[1:]
				}
				key := checkpoint.Key{Session: fmt.Sprintf("async%02d-%d-%d", i, round, n/pairs)}
				inFlight = append(inFlight, c.cp.AppendAsync(ctx, key, conv.pair(n)))
			}
			for _, f := range inFlight {
				if !wait(f) {
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	return done.Load(), took, nil
}

// groupWatch counts the saves per request on cp.save.> (a subscriber of its own, in this process:
// the server's copy of every request and this process's reading of it count against checkpointd).
type groupWatch struct {
	sub             *nats.Subscription
	requests, saves atomic.Int64
	largest         atomic.Int64
}

func watchGroups(nc *nats.Conn) (*groupWatch, error) {
	g := &groupWatch{}
	sub, err := nc.Subscribe(wire.SaveSubjectPrefix+">", func(m *nats.Msg) {
		k := int64(1)
		if s := m.Header.Get(wire.HdrGroup); s != "" {
			n, _ := strconv.Atoi(s)
			k = int64(n)
		}
		g.requests.Add(1)
		g.saves.Add(k)
		for {
			l := g.largest.Load()
			if k <= l || g.largest.CompareAndSwap(l, k) {
				break
			}
		}
	})
	if err != nil {
		return nil, err
	}
	g.sub = sub
	return g, nc.Flush()
}

func (g *groupWatch) String() string {
	return fmt.Sprintf("%d saves in %d requests, %.1f per request on average, at most %d",
		g.saves.Load(), g.requests.Load(), float64(g.saves.Load())/float64(max(g.requests.Load(), 1)), g.largest.Load())
}
