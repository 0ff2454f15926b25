package snapshot

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Retention says which versions of a session to keep. The head is always kept. Zero values keep
// everything.
type Retention struct {
	KeepLast int           // keep at least the newest KeepLast versions (0: no count limit)
	MaxAge   time.Duration // keep versions younger than this (0: no age limit)
}

// Pruned describes what a prune removed, or would remove.
type Pruned struct {
	Key      wire.Key `json:"key"`
	Versions []uint64 `json:"versions"` // removed (or, in a dry run, to be removed)
	Kept     int      `json:"kept"`
	Gens     []uint64 `json:"gens,omitempty"` // older generations no kept version uses, removed
	Segments int      `json:"segments"`       // segments removed with them
}

// Prune removes the versions of a session that ret does not keep. A version is kept if it is the
// head, among the newest KeepLast, or younger than MaxAge — when both limits are set, a version is
// removed only if both would remove it. Versions are numbered in the order they were created, so the
// removed ones are always the oldest: the head records the first kept version. Messages that kept
// versions share are never touched; what goes is the removed versions' records, and any older
// generation (layout and the segments only it used) no kept version reads. A restore of a kept
// version that runs meanwhile succeeds: it finds its segments, or starts again from the new head.
func Prune(ctx context.Context, st Store, key wire.Key, ret Retention, now time.Time, dryRun bool) (Pruned, error) {
	res := Pruned{Key: key, Versions: []uint64{}}
	if ret.KeepLast <= 0 && ret.MaxAge <= 0 {
		return res, nil
	}
	head, rev, err := st.Head(ctx, key)
	if err != nil {
		return res, err
	}
	if !head.Exists() {
		return res, nil
	}
	all, err := History(ctx, st, key)
	if err != nil {
		return res, err
	}
	cut := uint64(0) // remove every version up to and including cut
	for _, v := range all {
		byCount := ret.KeepLast <= 0 || head.Version.Version-v.Version >= uint64(ret.KeepLast)
		byAge := ret.MaxAge <= 0 || now.Sub(v.Created) > ret.MaxAge
		if v.Version == head.Version.Version || !byCount || !byAge {
			break // versions are in creation order: everything from here on is kept
		}
		cut = v.Version
		res.Versions = append(res.Versions, v.Version)
	}
	res.Kept = len(all) - len(res.Versions)
	if cut == 0 {
		return res, nil
	}
	usedGens := map[uint64]bool{head.Layout.Gen: true}
	var keptRecords []wire.Version
	for _, v := range all {
		if v.Version > cut {
			usedGens[v.Gen] = true
		}
		if v.Version > cut && v.Version < head.Version.Version && archived(head, v.Version) {
			keptRecords = append(keptRecords, v)
		}
	}
	next := head
	next.FirstVersion = cut + 1
	next.OldGens = nil
	var dropGens []uint64
	for _, g := range head.OldGens {
		if usedGens[g] {
			next.OldGens = append(next.OldGens, g)
		} else {
			dropGens = append(dropGens, g)
		}
	}
	res.Gens = dropGens
	if dryRun {
		return res, nil
	}

	// The archive keeps only the kept records.
	next.Archives = nil
	if len(keptRecords) > 0 {
		slices.SortFunc(keptRecords, func(a, b wire.Version) int { return cmp.Compare(a.Version, b.Version) })
		raw, err := json.Marshal(keptRecords)
		if err != nil {
			return res, err
		}
		ref, _, err := putSegment(ctx, st, key, raw, len(keptRecords))
		if err != nil {
			return res, err
		}
		next.Archives = []Archive{{From: keptRecords[0].Version, To: keptRecords[len(keptRecords)-1].Version, Segment: ref}}
	}
	if err := st.SwapHead(ctx, next, rev); err != nil {
		for _, a := range next.Archives {
			discard(ctx, st, key, []SegmentRef{a.Segment})
		}
		return res, err
	}

	// Committed: now remove what nothing refers to any more.
	inUse, err := referenced(ctx, st, next)
	if err != nil {
		return res, err
	}
	for _, a := range next.Archives {
		inUse[a.Segment.ID] = true
	}
	for _, a := range head.Archives {
		if !inUse[a.Segment.ID] {
			if err := st.DeleteSegment(ctx, key, a.Segment); err != nil && !errors.Is(err, ErrNotFound) {
				return res, err
			}
		}
	}
	for _, g := range dropGens {
		l, err := st.Layout(ctx, key, g)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return res, err
		}
		for _, e := range l.Extents {
			if inUse[e.Segment.ID] {
				continue
			}
			if err := st.DeleteSegment(ctx, key, e.Segment); err != nil && !errors.Is(err, ErrNotFound) {
				return res, err
			}
			inUse[e.Segment.ID] = true
			res.Segments++
		}
		if err := st.DeleteLayout(ctx, key, g); err != nil && !errors.Is(err, ErrNotFound) {
			return res, err
		}
	}
	for _, n := range res.Versions {
		if err := st.DeleteVersion(ctx, key, n); err != nil && !errors.Is(err, ErrNotFound) {
			return res, fmt.Errorf("version %d: %w", n, err)
		}
	}
	return res, nil
}
