package transfer

import (
	"context"
	"time"
)

// HoldIngestBudget takes all of d's ingest budget, as a save in progress the longest would, and
// sets how long other saves wait for it; release gives it back.
func HoldIngestBudget(d *Daemon, wait time.Duration) (release func()) {
	b := d.in.budget
	b.mu.Lock()
	b.wait = wait
	b.mu.Unlock()
	r := b.begin(context.Background())
	_ = r.Reserve(b.limit) // the oldest: never waits
	return r.end
}

// SaveRequestPeakBytes is the most the save requests in progress at d ever held at once (their
// bodies and headers, as admitted).
func SaveRequestPeakBytes(d *Daemon) int64 {
	return d.saves.adm.Peak()
}
