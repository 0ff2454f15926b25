package engine

// recentRecords are the records of a session's last pack's versions and of the saves after it,
// oldest first, so that a save delivered again is recognised without a read (docs/format.md
// §8.5). Every save looks its save id up among them (savedBefore): with the default packs up to
// ~500 records, which a scan compared one by one on every save (~16 µs a save, 7 % of its CPU
// with 50 agents saving at once: BenchmarkIngest_FiftyAgents, docs/format.md §8.15l). The
// index by save id finds it at once.
type recentRecords struct {
	ok   bool // read since the session was loaded; until then, add does nothing
	list []Record
	byID map[string]int // save id → the index in list of its newest record
}

// reset empties the records; ok says whether the empty list is what the log holds (a session
// just made or deleted) or only that nothing is known yet.
func (r *recentRecords) reset(ok bool) {
	r.ok, r.list = ok, r.list[:0]
	clear(r.byID)
}

// set makes recs, oldest first, the known records.
func (r *recentRecords) set(recs []Record) {
	r.reset(true)
	for _, rec := range recs {
		r.add(rec)
	}
}

// add appends the record of a version just committed, if the records are known.
func (r *recentRecords) add(rec Record) {
	if !r.ok {
		return
	}
	if r.byID == nil {
		r.byID = map[string]int{}
	}
	r.byID[rec.SaveID] = len(r.list)
	r.list = append(r.list, rec)
}

// find returns the newest record save id made whose version is in [lo, hi].
func (r *recentRecords) find(saveID string, lo, hi uint64) (Record, bool) {
	i, ok := r.byID[saveID]
	if !ok {
		return Record{}, false
	}
	if v := r.list[i].Version; v >= lo && v <= hi {
		return r.list[i], true
	}
	// The save id's newest record is out of range: an older one may not be (a save id found
	// twice is rare, so the scan is too).
	for j := i - 1; j >= 0; j-- {
		if rec := r.list[j]; rec.SaveID == saveID && rec.Version >= lo && rec.Version <= hi {
			return rec, true
		}
	}
	return Record{}, false
}

// version returns the record of version v, if the records are known and hold it.
func (r *recentRecords) version(v uint64) (Record, bool) {
	if !r.ok {
		return Record{}, false
	}
	for i := len(r.list) - 1; i >= 0; i-- {
		if r.list[i].Version == v {
			return r.list[i], true
		}
	}
	return Record{}, false
}
