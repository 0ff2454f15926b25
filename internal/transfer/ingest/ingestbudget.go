package ingest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/transfer/housekeeping"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The ingest budget bounds the memory of the saves a daemon is settling at once.
//
// A save's bytes are the client's to choose: a chunk count, a declared size, a tiny zstd frame that
// decompresses to the size limit. Every buffer a save allocates for its body (the chunk it holds,
// the body as it is decompressed) is reserved here before it is made, and given back when the save
// is settled. While the saves in progress hold the whole budget, a save that needs more waits, at
// most budgetWait in all, and is then refused busy. One save is exempt: the one in progress the
// longest may always grow (its body up to --max-checkpoint-bytes, which ends any read), so a save
// larger than the budget still goes through, one at a time, and saves waiting on each other cannot
// hold each other up for good. The bytes held are therefore at most the budget plus what one save
// may hold: its bytes as received, twice --max-checkpoint-bytes (its body in the blocks it is read
// into, and joined into one buffer: codec.readGrowing), and the window of each zstd decoder it runs
// (codec.decoderBytes, 8.5 MiB at most; one per run of frames decoded at once, at most 4). A 74-byte
// frame that declares an 8 MiB window and decodes to 2 MiB holds 13.1 MB
// (TestIngestBudget_OneSaveHoldsAtMostItsBodyTwiceAndItsWindows).

// budgetWait is the longest a save waits for budget, in all, before it is refused busy.
const budgetWait = 2 * time.Second

// budgetRetryAfter is the retry hint of a save refused busy.
const budgetRetryAfter = time.Second

// Budget bounds the bytes of the saves being settled at once (above).
type Budget struct {
	limit int64
	wait  time.Duration

	mu    sync.Mutex
	used  int64
	peak  int64          // the most used ever was
	saves []*reservation // in progress, oldest first
	freed chan struct{}  // closed and replaced whenever bytes are given back or the oldest save changes
}

// NewBudget is a budget of limit bytes.
func NewBudget(limit int64) *Budget {
	return &Budget{limit: limit, wait: budgetWait, freed: make(chan struct{})}
}

// Hold takes the whole budget, as the save in progress the longest would, and makes other saves
// wait at most wait for room before they are refused busy; release gives it back. Tests use it to
// see a daemon at its limit.
func (b *Budget) Hold(wait time.Duration) (release func()) { return b.HoldAllBut(0, wait) }

// HoldAllBut is Hold leaving room bytes of the budget free.
func (b *Budget) HoldAllBut(room int64, wait time.Duration) (release func()) {
	b.mu.Lock()
	b.wait = wait
	b.mu.Unlock()
	r := b.begin(context.Background())
	_ = r.Reserve(b.limit - room) // the oldest: never waits
	return r.end
}

// reservation is one save's share of the budget. It implements codec.Growth.
type reservation struct {
	b        *Budget
	ctx      context.Context
	held     int64
	deadline time.Time // set the first time the save waits
	large    bool      // the save held a large checkpoint's bytes (mindGC)
	exemptTo int64     // as the oldest, past the budget only while it holds at most this; 0: no bound (capExemption)
}

// begin starts the reservation of one save; end gives back all of it.
func (b *Budget) begin(ctx context.Context) *reservation {
	r := &reservation{b: b, ctx: ctx}
	b.mu.Lock()
	b.saves = append(b.saves, r)
	b.mu.Unlock()
	return r
}

// Reserve takes n more bytes, waiting while the budget is spent; it refuses with a busy error once
// the save has waited budgetWait in all.
func (r *reservation) Reserve(n int64) error { return r.reserve(n, true) }

// withoutWaiting is r as a codec.Growth whose Reserve refuses busy at once when the budget is
// spent, for reads made while the session is locked (the engine's repeat check): saves of one
// session waiting for budget in turn, each holding the lock while it waits, would answer after
// budgetWait times their number.
func (r *reservation) withoutWaiting() codec.Growth { return noWait{r} }

type noWait struct{ r *reservation }

func (w noWait) Reserve(n int64) error { return w.r.reserve(n, false) }
func (w noWait) Release(n int64)       { w.r.Release(n) }

func (r *reservation) reserve(n int64, mayWait bool) error {
	b := r.b
	for {
		b.mu.Lock()
		if b.used+n <= b.limit || b.saves[0] == r && (r.exemptTo == 0 || r.held+n <= r.exemptTo) {
			b.used += n
			r.held += n
			b.peak = max(b.peak, b.used)
			b.mu.Unlock()
			r.mindGC()
			return nil
		}
		freed, used := b.freed, b.used
		if !mayWait {
			b.mu.Unlock()
			return busySave(used, b.limit, n)
		}
		if r.deadline.IsZero() {
			r.deadline = time.Now().Add(b.wait)
		}
		b.mu.Unlock()
		wait := time.Until(r.deadline)
		if wait <= 0 {
			return busySave(used, b.limit, n)
		}
		t := time.NewTimer(wait)
		select {
		case <-freed:
		case <-t.C:
		case <-r.ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: waiting for ingest memory: %v", edge.ErrUnavailable, r.ctx.Err())
		}
		t.Stop()
	}
}

// capExemption bounds r's exemption as the oldest save: past the budget, it grows only while it
// holds at most limit bytes (at least what it holds now). A group of saves sets it once its first
// save is read, to what one save may hold: the exemption lets one save larger than the budget
// through, and k saves of a group, each a small zstd frame that decodes to
// --max-checkpoint-bytes, would otherwise hold k times that beyond the budget.
func (r *reservation) capExemption(limit int64) {
	r.b.mu.Lock()
	r.exemptTo = max(limit, r.held)
	r.b.mu.Unlock()
}

// Release gives back n bytes of a buffer the save no longer uses.
func (r *reservation) Release(n int64) {
	if n <= 0 {
		return
	}
	b := r.b
	b.mu.Lock()
	b.used -= n
	r.held -= n
	b.wake()
	b.mu.Unlock()
}

// end gives back everything the save holds; the save leaves the budget.
func (r *reservation) end() {
	b := r.b
	b.mu.Lock()
	b.used -= r.held
	r.held = 0
	for i, s := range b.saves {
		if s == r {
			b.saves = append(b.saves[:i], b.saves[i+1:]...)
			break
		}
	}
	b.wake()
	b.mu.Unlock()
	if r.large {
		housekeeping.EndLargeSave()
		// What a large save read is garbage now, as large as the save: collect it before the next
		// large save grows, or refused bombs would pile up until the collector comes round.
		runtime.GC()
	}
}

// wake tells the saves waiting that something changed. Called with b.mu held.
func (b *Budget) wake() {
	close(b.freed)
	b.freed = make(chan struct{})
}

// Peak returns the most bytes the saves in progress ever held at once.
func (b *Budget) Peak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// inUse returns the bytes the saves in progress hold.
func (b *Budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// mindGC lowers the collector's target once the save holds a large checkpoint's bytes, until end
// (housekeeping/eagergc.go), which also collects them: decided by bytes actually held, never by a size the
// client declared.
func (r *reservation) mindGC() {
	if !r.large && r.held >= housekeeping.LargeBytes {
		r.large = true
		housekeeping.BeginLargeSave()
	}
}

// busySave is the refusal of a save that found no budget in time.
func busySave(used, limit, want int64) *wire.Error {
	ms := budgetRetryAfter.Milliseconds()
	return &wire.Error{Code: wire.CodeBusy, RetryAfterMillis: &ms,
		Message: fmt.Sprintf("saves in progress hold %d bytes of the %d this daemon allows them (--ingest-memory), and this one needed %d more: try again later", used, limit, want)}
}
