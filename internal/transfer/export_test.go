package transfer

import (
	"time"
)

// HoldIngestBudget takes all of d's ingest budget, as a save in progress the longest would, and
// sets how long other saves wait for it; release gives it back.
func HoldIngestBudget(d *Daemon, wait time.Duration) (release func()) { return d.budget.Hold(wait) }

// SaveRequestPeakBytes is the most the save requests in progress at d ever held at once (their
// bodies and headers, as admitted).
func SaveRequestPeakBytes(d *Daemon) int64 {
	return d.saves.PeakBytes()
}

// HoldIngestBudgetBut is HoldIngestBudget leaving room bytes free.
func HoldIngestBudgetBut(d *Daemon, room int64, wait time.Duration) (release func()) {
	return d.budget.HoldAllBut(room, wait)
}
