package transfer

// IngestBudgetPeakBytes is the most the saves being settled at d ever held at once, in its ingest
// budget (what the budget's exemption of the oldest save lets past it included).
func IngestBudgetPeakBytes(d *Daemon) int64 { return d.budget.Peak() }
