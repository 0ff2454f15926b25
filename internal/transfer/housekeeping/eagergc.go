package housekeeping

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// Large checkpoints and the collector.
//
// Next to a conversation of tens of MiB, Go's default collector target (GOGC=100) lets garbage grow
// to as much again before a collection: the pieces read from JetStream, the pieces of the reply, and
// with the embedded server its own copies of every message all come and go while the conversation
// stays. While a large checkpoint is being saved or read, the daemon runs the collector with a lower
// target and sets it back afterwards, so peak memory stays close to what is live. A GOGC set in the
// environment is left alone. A save counts from the moment it holds largeBytes of body (the ingest
// budget's mindGC, by bytes received) until it is settled; a read counts from its version's record
// (rawBytes) and each of its pieces, and for readHoldGC after the last.

// LargeBytes is the size from which a checkpoint counts as large.
const LargeBytes = 16 << 20

// readHoldGC is how long a large read keeps the target lowered after its latest piece: the next
// piece is asked for far sooner by a client still reading.
const readHoldGC = 2 * time.Second

// EagerGCPercent is the collector target while a large checkpoint is in flight.
const EagerGCPercent = 25

// eager is process-wide, as the collector's target is.
var eager = eagerGC{disabled: os.Getenv("GOGC") != ""}

type eagerGC struct {
	disabled bool
	mu       sync.Mutex
	n        int       // large saves in progress
	until    time.Time // reads of large versions keep it lowered until then
	prev     int       // the target to go back to
	lowered  bool
	timer    *time.Timer
}

// begin lowers the target for a large save until the matching end.
func (g *eagerGC) begin() {
	if g.disabled {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	g.lower()
}

func (g *eagerGC) end() {
	if g.disabled {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	g.restore()
}

// read lowers the target for a while if the read is of a large checkpoint (rawBytes: its size as
// the client gets it, decompressed).
func (g *eagerGC) read(rawBytes int64) {
	if rawBytes >= LargeBytes {
		g.hold(readHoldGC)
	}
}

// hold lowers the target for d from now: a large read is served in pieces, one request each.
func (g *eagerGC) hold(d time.Duration) {
	if g.disabled {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if until := time.Now().Add(d); until.After(g.until) {
		g.until = until
	}
	g.lower()
	if g.timer == nil {
		g.timer = time.AfterFunc(d, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.restore()
		})
	} else {
		g.timer.Reset(d)
	}
}

func (g *eagerGC) lower() {
	if g.lowered {
		return
	}
	if prev := debug.SetGCPercent(EagerGCPercent); prev <= EagerGCPercent {
		debug.SetGCPercent(prev) // already as low, or off
	} else {
		g.prev, g.lowered = prev, true
	}
}

// restore sets the target back once no large save is in progress and no hold is running.
func (g *eagerGC) restore() {
	if !g.lowered || g.n > 0 {
		return
	}
	if wait := time.Until(g.until); wait > 0 {
		if g.timer != nil {
			g.timer.Reset(wait)
		}
		return
	}
	debug.SetGCPercent(g.prev)
	g.lowered = false
}

// BeginLargeSave lowers the collector's target for a large save (one holding LargeBytes of body)
// until the matching EndLargeSave.
func BeginLargeSave() { eager.begin() }

// EndLargeSave ends what BeginLargeSave began, once the save is settled.
func EndLargeSave() { eager.end() }

// LargeRead lowers the target for a while if a read is of a large checkpoint (rawBytes: its size
// as the client gets it, decompressed).
func LargeRead(rawBytes int64) { eager.read(rawBytes) }

// EagerGCDisabled says GOGC is set in the environment, so that the daemon leaves the collector's
// target alone.
func EagerGCDisabled() bool { return eager.disabled }

// GCPercent is the collector's target now, read without setting it (setting it, even back, would
// race with the daemon's own changes): what tests of the eager target watch.
func GCPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}
