package engine

import (
	"context"
	"fmt"
)

// Stand-in until s21-gengine: SaveGroup as a loop of Save, one entry per save. The engine's own
// SaveGroup (branch s21-gengine) stores the group in one entry; this file goes at that merge.

// GroupResult is the outcome of one save of a group.
type GroupResult struct {
	Saved Saved
	Err   error
}

// SaveGroup stores reqs, saves of ONE session in order, as consecutive versions. For i>0,
// reqs[i].Base (when set) must be the version reqs[i-1] makes, or it is a conflict. A refused save
// fails; the saves after it are refused as conflicts without being stored; those before are
// stored. A save id already saved is a duplicate (as Save). len(result) == len(reqs).
func (e *Engine) SaveGroup(ctx context.Context, reqs []SaveRequest) []GroupResult {
	out := make([]GroupResult, len(reqs))
	for i, req := range reqs {
		if i > 0 && req.Base != nil && *req.Base != out[i-1].Saved.Record.Version {
			out[i].Err = &ConflictError{Key: req.Key, Expected: *req.Base, Head: out[i-1].Saved.Record.Version,
				Detail: fmt.Sprintf("save %d of the group appends to version %d, but save %d made version %d", i, *req.Base, i-1, out[i-1].Saved.Record.Version)}
		} else {
			out[i].Saved, out[i].Err = e.Save(ctx, req)
		}
		if out[i].Err != nil {
			refuseRest(out[i+1:], reqs[i+1:], i, out[i].Err)
			return out
		}
	}
	return out
}

// refuseRest fails the saves after save i of a group, which failed with err: a refusal makes
// their bases wrong (a conflict); storage trouble leaves them untried, with the same error, so a
// writer sends them again as it sends save i.
func refuseRest(out []GroupResult, reqs []SaveRequest, i int, err error) {
	for j := range out {
		if IsRefusal(err) {
			out[j].Err = &ConflictError{Key: reqs[j].Key, Detail: fmt.Sprintf("an earlier save of the group was refused (save %d: %v)", i, err)}
		} else {
			out[j].Err = err
		}
	}
}
