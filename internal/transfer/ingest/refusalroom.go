package ingest

import (
	"encoding/json"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// A refusal quotes what it refuses: a header's value, up to the 64 KiB of a save's headers. Quoted
// (%q) and then JSON-escaped, a control byte takes 5 bytes, so a refusal can be ~5 times the
// request that caused it: more than a server's max_payload, below ~330 KB, lets through. Such a
// reply, or result, is refused by the server, and an acknowledged request would go unanswered (a
// save off the ingest stream, retried forever). So a refusal that does not fit is cut to fit, and
// says so (wire.Error.Cut).

// encodeResult is res's JSON, at most room bytes long when res is a refusal (wire.Error.Cut). A
// stored save's result is never cut: it carries no client bytes beyond its ids, which
// wire.ValidateID bounds.
// It is written by appendResult (resultjson.go): the bytes encoding/json writes, in a fifth of its
// time (docs/format.md §8.15u).
func encodeResult(res wire.SaveResult, room int) []byte {
	data := appendResult(make([]byte, 0, 1024), res)
	if len(data) <= room || res.Error == nil {
		return data
	}
	res.Error = res.Error.Cut(len(data) - room)
	return appendResult(data[:0], res)
}

// encodeGroupRefusal is the reply to a group refused whole, at most room bytes long.
func encodeGroupRefusal(e *wire.Error, room int) ([]byte, error) {
	data, err := json.Marshal(wire.GroupReply{Error: e})
	if err != nil || len(data) <= room {
		return data, err
	}
	return json.Marshal(wire.GroupReply{Error: e.Cut(len(data) - room)})
}

// fitGroupRefusals cuts the refusals among a group's results, largest first, until the group's
// reply fits room. Only a reply that does not fit comes here: the results of stored saves and
// of saves answered busy are bounded (resultBound), a refusal's quote is not.
func fitGroupRefusals(results []wire.SaveResult, room int) {
	sizes := make([]int, len(results))
	total := len(`{"results":[]}`)
	for i, res := range results {
		sizes[i] = len(appendResult(nil, res)) + 1 // and its comma
		total += sizes[i]
	}
	cut := make([]bool, len(results))
	for total > room {
		i := largestRefusal(results, sizes, cut)
		if i < 0 {
			return // nothing left to cut
		}
		results[i].Error, cut[i] = results[i].Error.Cut(total-room), true
		n := len(appendResult(nil, results[i])) + 1
		total, sizes[i] = total+n-sizes[i], n
	}
}

// largestRefusal is the index of the largest refusal not cut yet, or -1.
func largestRefusal(results []wire.SaveResult, sizes []int, cut []bool) int {
	best := -1
	for i, res := range results {
		if res.Error != nil && !cut[i] && (best < 0 || sizes[i] > sizes[best]) {
			best = i
		}
	}
	return best
}
