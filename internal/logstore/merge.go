package logstore

import (
	"context"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Merges keep the number of extents a read fetches logarithmic while writing each stored byte
// about once per level. Extents have levels: a save's own extent is level 0; a merge joins the
// trailing run into one extent of the next level. Once the tail holds MergeFactor level-0
// extents they are merged into one level-1 extent, together with the level-1 extents before
// them if that makes MergeFactor of them (then level 2), and so on (a cascade is one merge,
// written once). A merge copies stored bytes (stream.go): it neither decodes nor recompresses.
//
// A merge is two writes: the merged data on the level's subject (no compare-and-swap: until the
// commit nothing refers to it), then a merge entry on the log subject with the whole layout,
// compare-and-swapped like a save. After the commit it purges what it superseded, by subject and
// sequence, so no delete markers are written: the log subject below the commit (saves, leases,
// older commits), and each lower level's subject below its newest merged entry.

// MergeResult says what a merge did (zero: nothing to merge).
type MergeResult struct {
	Level     int // level of the extent written
	Extents   int // extents joined
	Bytes     int // stored bytes written
	CommitSeq uint64
}

// Maintain merges key's layout if its tail is due (the daemon calls it after answering a save).
func (s *Store) Maintain(ctx context.Context, k wire.Key) (MergeResult, error) {
	if s.cfg.MergeFactor < 0 {
		return MergeResult{}, nil
	}
	sess, err := s.session(ctx, k)
	if err != nil {
		return MergeResult{}, err
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	layout, err := s.fullLayout(ctx, sess)
	if err != nil {
		return MergeResult{}, err
	}
	start, level := mergePlan(layout, s.cfg.MergeFactor)
	if level == 0 {
		return MergeResult{}, nil
	}
	res, err := s.merge(ctx, sess, layout, start, level)
	if err != nil {
		s.forget(sess)
	}
	return res, err
}

// mergePlan returns where the tail to merge starts and the level it becomes (0: nothing due).
func mergePlan(layout []Extent, factor int) (start, level int) {
	start = len(layout)
	for start > 0 && layout[start-1].Level == 0 && !layout[start-1].Shared {
		start--
	}
	if len(layout)-start < factor {
		return 0, 0
	}
	level = 1
	for {
		n := 0
		for i := start - 1; i >= 0 && layout[i].Level == level && !layout[i].Shared; i-- {
			n++
		}
		if n < factor-1 {
			return start, level
		}
		start -= n
		level++
	}
}

// merge writes layout[start:] as one extent of level, commits, then purges. The session's lock
// must be held.
func (s *Store) merge(ctx context.Context, sess *session, layout []Extent, start, level int) (MergeResult, error) {
	tail := layout[start:]
	seqs := make([]uint64, len(tail))
	for i, e := range tail {
		seqs[i] = e.Seq
	}
	bodies, err := s.getMany(ctx, seqs)
	if err != nil {
		return MergeResult{}, err
	}
	data := make([][]byte, len(tail))
	var recs []Record
	merged := Extent{Level: level, From: tail[0].From, To: tail[len(tail)-1].To, Frame: tail[0].Frame}
	for i, b := range bodies {
		_, meta, d, err := decodeEntry(b)
		if err != nil {
			return MergeResult{}, fmt.Errorf("%s seq %d: %w", sess.subject, seqs[i], err)
		}
		data[i] = d
		if meta.Record != nil {
			recs = append(recs, *meta.Record)
		}
		recs = append(recs, meta.Records...)
		merged.Messages += tail[i].Messages
		merged.RawBytes += tail[i].RawBytes
	}
	joined := joinData(tail, data)
	merged.Stored = len(joined)
	body, err := encodeEntry(KindData, Meta{Records: recs, Own: &merged}, joined)
	if err != nil {
		return MergeResult{}, err
	}
	if merged.Seq, err = s.publish(ctx, DataSubject(sess.key, level), body, -1); err != nil {
		return MergeResult{}, err
	}

	head := sess.next()
	head.Base, head.Since = 0, nil
	head.Layout = append(append([]Extent{}, layout[:start]...), merged)
	commit, err := encodeEntry(KindMerge, Meta{Head: &head}, nil)
	if err != nil {
		return MergeResult{}, err
	}
	seq, err := s.publish(ctx, sess.subject, commit, int64(sess.lastSeq))
	if err != nil {
		// The data entry is garbage; the next merge into this level purges it with the rest.
		return MergeResult{}, err
	}
	sess.commit(seq, head, nil, nil)
	res := MergeResult{Level: level, Extents: len(tail), Bytes: len(joined), CommitSeq: seq}
	return res, s.purgeMerged(ctx, sess.key, tail, seq)
}

// purgeMerged removes what a committed merge superseded. A crash before it leaves garbage that
// the next merge's purges remove: they take everything below a sequence, not a list.
func (s *Store) purgeMerged(ctx context.Context, k wire.Key, tail []Extent, commit uint64) error {
	if err := s.purge(ctx, LogSubject(k), commit); err != nil {
		return err
	}
	below := map[int]uint64{}
	for _, e := range tail {
		if e.Level > 0 && e.Seq+1 > below[e.Level] {
			below[e.Level] = e.Seq + 1
		}
	}
	for level, seq := range below {
		if err := s.purge(ctx, DataSubject(k, level), seq); err != nil {
			return err
		}
	}
	return nil
}
