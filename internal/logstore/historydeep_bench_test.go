package logstore_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// BenchmarkHistoryDeepPages: pages of 100 records of a session of 10,239 versions, newest first,
// at several depths, each from the cursor the page before gave: with its pack hint (the engine's
// HistoryCursor.Pack, walked from that pack) against without it (Pack 0: walked from the head, as
// the daemon did while its wire cursor carried the version alone). Interleaved, p50 of
// CP_BENCH_ROUNDS rounds (default 20).
//
//	go test -run '^$' -bench HistoryDeepPages -benchtime 1x ./internal/logstore/
func BenchmarkHistoryDeepPages(b *testing.B) {
	srv := startBenchServer(b, b.TempDir())
	l := openLog(b, benchConnect(b, srv.s.ClientURL()))
	e := engine.New(l, engine.Config{})
	const n, limit = 10239, 100
	k := sessionsOfVersions(b, e, "deep", []int{n})[n]

	// The cursors of every page, from the head down.
	var cursors []engine.HistoryCursor
	for cur := (engine.HistoryCursor{}); ; {
		_, next, err := e.HistoryPage(ctx, k, cur, limit)
		must(b, err)
		if next == (engine.HistoryCursor{}) {
			break
		}
		cursors = append(cursors, next)
		cur = next
	}
	depths := []int{1, 10, 50, len(cursors) - 1} // pages down: about 100, 1,000, 5,000 and 10,000 versions
	rounds := 20
	if s := os.Getenv("CP_BENCH_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	lat := make([][2][]time.Duration, len(depths))
	for range rounds {
		for _, x := range rand.Perm(2 * len(depths)) {
			i, hinted := x/2, x%2 == 0
			cur := cursors[depths[i]-1]
			if !hinted {
				cur.Pack = 0
			}
			t0 := time.Now()
			recs, _, err := e.HistoryPage(ctx, k, cur, limit)
			must(b, err)
			if len(recs) == 0 || recs[0].Version != cur.Before-1 {
				b.Fatalf("page below %d: %d records", cur.Before, len(recs))
			}
			lat[i][x%2] = append(lat[i][x%2], time.Since(t0))
		}
	}
	w := table(fmt.Sprintf("History pages of %d below a cursor, session of %d versions, p50 of %d interleaved (%s)", limit, n, rounds, uptime()))
	fmt.Fprintln(w, "page below version\twith the pack hint\twalked from the head\tratio (head / hint)")
	for i, d := range depths {
		h, nh := p50(lat[i][0]), p50(lat[i][1])
		fmt.Fprintf(w, "%d (page %d)\t%s\t%s\t%s\n", cursors[d-1].Before, d+1, ms(h), ms(nh), ratio(nh, h))
	}
	must(b, w.Flush())
}
