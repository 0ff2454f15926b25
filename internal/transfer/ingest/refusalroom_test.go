package ingest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// A refusal whose JSON exceeds the room is cut in one step to fit it, whatever its bytes escape
// to in JSON (1 to 6 bytes each), between runes, and says it was cut; one that fits is untouched.
func TestEncodeResult_CutsARefusalToFit(t *testing.T) {
	key := wire.Key{Namespace: "default", Session: "s", Agent: "main"}
	var msgs []string
	for _, unit := range []string{"a", "\x01", `\x01`, "é", "€", "<&>", "\xff", "\xe2\x82"} {
		value := strings.Repeat(unit, 20000)
		msgs = append(msgs, fmt.Sprintf("header Cp-Reason: %q unknown", value), "header Cp-Reason: "+value)
	}
	// Escaped more at the start than on average: the first cut is not short enough.
	msgs = append(msgs, "header Cp-Reason: "+strings.Repeat("\x01", 20000)+strings.Repeat("a", 100000))
	for _, msg := range msgs {
		unit := msg[len("header Cp-Reason: "):][:3]
		for _, room := range []int{1 << 10, 4 << 10, 64 << 10, 1 << 20} {
			res := wire.SaveResult{SaveID: "id", Key: key, Error: &wire.Error{Code: wire.CodeBadRequest, Message: msg}}
			whole, err := json.Marshal(res)
			require.NoError(t, err)
			data := encodeResult(res, room)
			var back wire.SaveResult
			require.NoError(t, json.Unmarshal(data, &back))
			if len(whole) <= room {
				require.Equal(t, whole, data, "a refusal that fits is sent whole")
				continue
			}
			require.LessOrEqual(t, len(data), room, "unit %q, room %d", unit, room)
			require.Greater(t, len(data), room*9/10, "unit %q, room %d: cut no more than needed, about", unit, room)
			require.True(t, strings.HasPrefix(back.Error.Message, "header Cp-Reason: "))
			require.Contains(t, back.Error.Message, fmt.Sprintf("cut to fit max_payload; %d bytes in all", len(msg)))
			require.Equal(t, msg, res.Error.Message, "the caller's refusal is not changed")
		}
	}
}
