package ingest

import (
	"sync"
	"time"
)

// workers run the admitted save requests, each on a goroutine that settled saves before whenever
// one is idle. A save runs deep (JSON, the engine, zstd, the publish) and a new goroutine's stack
// starts small: a goroutine per request grew and copied its stack for every save, about a tenth
// of the daemon's CPU time with 50 agents saving at once (BenchmarkIngest_FiftyAgents). A worker
// keeps its grown stack. There are never more workers than requests ever in progress at once
// (admission bounds them: maxSaveRequests), and a worker idle for workerIdle ends.
type workers struct {
	work chan func() // unbuffered: taken only by a worker waiting for it
	quit chan struct{}
	once sync.Once
}

// workerIdle is how long a worker waits for another request before it ends.
const workerIdle = 30 * time.Second

func newWorkers() *workers {
	return &workers{work: make(chan func()), quit: make(chan struct{})}
}

// run runs f on an idle worker, or on a new one; it never waits.
func (w *workers) run(f func()) {
	select {
	case w.work <- f:
	default:
		go w.loop(f)
	}
}

// loop runs f, then whatever it is handed, until it has been idle for workerIdle or stop.
func (w *workers) loop(f func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(workerIdle)
		select {
		case f = <-w.work:
		case <-idle.C:
			return
		case <-w.quit:
			return
		}
	}
}

// stop ends the idle workers (and each busy one once its request is done).
func (w *workers) stop() {
	w.once.Do(func() { close(w.quit) })
}
