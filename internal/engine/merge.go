package engine

import (
	"cmp"
	"slices"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// AgentConversation is one agent's messages, for a merged view.
type AgentConversation struct {
	Agent    string
	Messages [][]byte
}

// Merge interleaves the conversations of a session's agents by timestamp into one view. The order is
// stable: each agent's messages keep their own order (a message without a timestamp takes the one
// before it in its conversation), and ties go to the agents in the order given. Each message is
// annotated with its agent (codec.Annotate); prefix adds the "[agentId] " text prefix.
func Merge(convs []AgentConversation, prefix bool) [][]byte {
	type entry struct {
		ts       float64
		agent, i int
		msg      []byte
	}
	var all []entry
	for a, c := range convs {
		last := 0.0
		for i, m := range c.Messages {
			if ts, ok := codec.Timestamp(m); ok && ts >= last {
				last = ts
			}
			all = append(all, entry{ts: last, agent: a, i: i, msg: m})
		}
	}
	slices.SortStableFunc(all, func(x, y entry) int {
		return cmp.Or(cmp.Compare(x.ts, y.ts), cmp.Compare(x.agent, y.agent), cmp.Compare(x.i, y.i))
	})
	out := make([][]byte, len(all))
	for i, e := range all {
		out[i] = codec.Annotate(e.msg, convs[e.agent].Agent, prefix)
	}
	return out
}
