package admission

import (
	"sync"
	"time"
)

// Workers run admitted requests, each on a goroutine that ran requests before whenever one is
// idle. A request runs deep (JSON, the engine, zstd, the publish) and a new goroutine's stack
// starts small: a goroutine per request grew and copied its stack every time, about a tenth of
// the process's CPU time with 50 agents saving at once (BenchmarkIngest_FiftyAgents in
// internal/transfer), 4% of a restore's. A worker keeps its grown stack. There are never more
// workers than requests ever in progress at once (which a Controller bounds), and a worker idle
// for workerIdle ends.
type Workers struct {
	work chan func() // unbuffered: taken only by a worker waiting for it
	quit chan struct{}
	once sync.Once
}

// workerIdle is how long a worker waits for another request before it ends.
const workerIdle = 30 * time.Second

// NewWorkers returns workers; none runs until Run.
func NewWorkers() *Workers {
	return &Workers{work: make(chan func()), quit: make(chan struct{})}
}

// Run runs f on an idle worker, or on a new one; it never waits.
func (w *Workers) Run(f func()) {
	select {
	case w.work <- f:
	default:
		go w.loop(f)
	}
}

// loop runs f, then whatever it is handed, until it has been idle for workerIdle or stop.
func (w *Workers) loop(f func()) {
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

// Stop ends the idle workers (and each busy one once its request is done). A Run after it still
// runs its function, on a goroutine that then ends.
func (w *Workers) Stop() {
	w.once.Do(func() { close(w.quit) })
}
