package checkpoint

import (
	"encoding/json"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// decodeGroupReply decodes the reply to a group of saves. The results of stored saves are read
// by a decoder written for the shape the daemon writes (docs/format.md §8.15n: encoding/json spent
// ~7 µs on each ~1 KB result, a fifth of a grouped save's CPU); anything else in the reply (a
// refusal, an escaped string, a field it does not know, a null) makes it give up, and the whole
// reply is decoded by encoding/json instead. FuzzGroupReply checks that whatever it accepts,
// encoding/json reads the same.
func decodeGroupReply(data []byte, rep *groupReply) error {
	if r, ok := fastGroupReply(data); ok {
		*rep = r
		return nil
	}
	return json.Unmarshal(data, rep)
}

// groupReply is a group's reply as the SDK reads it: the results, or the refusal of the whole
// group, or (Key) a single save's result from a daemon that does not know groups.
type groupReply struct {
	wire.GroupReply
	Key *wire.Key `json:"key"`
}

// fastGroupReply reads {"results":[...]} of results of stored saves (wire.PlainGroupResults); ok
// is false for anything else.
func fastGroupReply(data []byte) (groupReply, bool) {
	results, ok := wire.PlainGroupResults(data)
	var rep groupReply
	rep.Results = results
	return rep, ok
}
