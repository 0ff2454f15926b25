package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/checkpointd/checkpointd/checkpoint"
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

// requestSaves are the daemon's save requests and the saves they carried so far, read from its
// /metrics (save_request_saves: a histogram of the saves per request). A subscriber of cp.save.>
// in this process would be sent a copy of every request, which the server's copying and this
// process's reading charged to checkpointd: 6–14 µs a save, 2–3 points of the row (measured
// alternately, BENCHMARKS.md). A scrape before and after the phase costs nothing per save.
type requestSaves struct {
	requests, saves float64
	known           bool // false: the daemon does not report it (a checkpointd from before it)
}

const requestSavesMetric = "checkpointd_save_request_saves"

func scrapeRequestSaves(httpAddr string) (requestSaves, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return requestSaves{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return requestSaves{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var r requestSaves
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for lines.Scan() {
		name, value, ok := strings.Cut(lines.Text(), " ")
		var into *float64
		switch name {
		case requestSavesMetric + "_count":
			into = &r.requests
		case requestSavesMetric + "_sum":
			into = &r.saves
		}
		if !ok || into == nil {
			continue
		}
		if *into, err = strconv.ParseFloat(value, 64); err != nil {
			return requestSaves{}, fmt.Errorf("/metrics: %s: %w", name, err)
		}
		r.known = true
	}
	return r, lines.Err()
}

// since is what was counted between before and r, said for the report.
func (r requestSaves) since(before requestSaves) string {
	if !r.known || !before.known {
		return "not reported by this checkpointd (no " + requestSavesMetric + " in its /metrics)"
	}
	saves, requests := r.saves-before.saves, r.requests-before.requests
	return fmt.Sprintf("%.0f saves in %.0f requests, %.1f per request on average", saves, requests, saves/max(requests, 1))
}
