package ingest

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// A refusal quotes what it refuses: a header's value, up to the 64 KiB of a save's headers. Quoted
// (%q) and then JSON-escaped, a control byte takes up to 6 bytes, so a refusal can be ~5 times the
// request that caused it: more than a server's max_payload, below ~330 KB, lets through. Such a
// reply, or result, is refused by the server, and an acknowledged request would go unanswered (a
// save off the ingest stream, retried forever). So a refusal that does not fit is cut to fit, and
// says so.

// encodeResult is res's JSON, at most room bytes long when res is a refusal (fitRefusal). A
// stored save's result is never cut: it carries no client bytes beyond its ids, which
// wire.ValidateID bounds.
func encodeResult(res wire.SaveResult, room int) ([]byte, error) {
	data, err := json.Marshal(res)
	if err != nil || len(data) <= room || res.Error == nil {
		return data, err
	}
	res.Error = fitRefusal(res.Error, len(data)-room)
	return json.Marshal(res)
}

// fitRefusal is e with its message cut so that its JSON encoding is at least excess bytes shorter,
// and a note saying so. Each try keeps the share of what is kept that the room allows at its
// average escaping (exact for a message of one kind of bytes, the usual attack); after a few tries
// that are still over, it cuts as many bytes more as it is over, which is enough: every byte takes
// at least one in JSON. It cuts between runes, where what is kept encodes as it did in the whole.
func fitRefusal(e *wire.Error, excess int) *wire.Error {
	msg := e.Message
	note := fmt.Sprintf("... (cut to fit max_payload; %d bytes in all)", len(msg))
	want := jsonLen(msg) - excess - len(note) // what the kept part may take, encoded
	keep, took := len(msg), jsonLen(msg)
	for try := 0; took > want && keep > 0; try++ {
		if try < 3 {
			keep = runeStart(msg, int(int64(max(want, 0))*int64(keep)/int64(took)))
		} else {
			keep = runeStart(msg, max(keep-(took-want), 0))
		}
		took = jsonLen(msg[:keep])
	}
	cut := *e
	cut.Message = msg[:keep] + note
	return &cut
}

// jsonLen is the length of s encoded as a JSON string, quotes included.
func jsonLen(s string) int {
	data, _ := json.Marshal(s) // a string always encodes
	return len(data)
}

// runeStart is i, or the closest start of a rune in s before it.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// encodeGroupRefusal is the reply to a group refused whole, at most room bytes long.
func encodeGroupRefusal(e *wire.Error, room int) ([]byte, error) {
	data, err := json.Marshal(wire.GroupReply{Error: e})
	if err != nil || len(data) <= room {
		return data, err
	}
	return json.Marshal(wire.GroupReply{Error: fitRefusal(e, len(data)-room)})
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
		results[i].Error, cut[i] = fitRefusal(results[i].Error, total-room), true
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
